"""Random LaTeX formulas, written the way jina-ocr-v1 writes them.

The generator builds expressions from a small grammar (atoms, sub/superscripts, fractions, roots,
big operators, functions, delimiters, accents) so every formula is valid LaTeX by construction, and
TeX then proves it by typesetting it. Display formulas add what inline math rarely has: matrices,
``cases``, multi-line ``aligned`` derivations. The source string is the ground truth, so its
spelling is kept canonical (braced scripts, one space around binary relations) to match what a
model is trained to emit.
"""

from __future__ import annotations

import random

LATIN = "abcdfghkmnpqrstuvwxyz"
UPPER = "ABCDEFGHKLMNPQRSTUVWXYZ"
GREEK = (
    r"\alpha \beta \gamma \delta \epsilon \varepsilon \zeta \eta \theta \vartheta \kappa \lambda \mu \nu "
    r"\xi \pi \rho \sigma \tau \phi \varphi \chi \psi \omega \Gamma \Delta \Theta \Lambda \Sigma \Phi \Psi \Omega"
).split()
INDICES = ("i", "j", "k", "n", "m", "t", "l")
FUNCTIONS = (r"\sin", r"\cos", r"\tan", r"\log", r"\ln", r"\exp", r"\tanh", r"\det", r"\max", r"\min")
RELATIONS = ("=", "=", "=", r"\leq", r"\geq", r"\approx", r"\neq", r"\propto", r"\sim", "<", ">", r"\equiv")
BINARY = ("+", "+", "-", "-", r"\cdot", r"\times", "", "")
ACCENTS = (r"\hat", r"\bar", r"\tilde", r"\vec", r"\dot", r"\mathbf", r"\mathcal", r"\mathrm")
CONDITIONS = ("<", ">", r"\geq", r"\leq")
CONTOURS = ("C", r"\partial \Omega", r"\gamma")
ROW_BREAK = r" \\ "
SETS = (r"\mathbb{R}", r"\mathbb{N}", r"\mathbb{Z}", r"\mathbb{C}", r"\mathbb{R}^{n}", r"\mathbb{R}^{d}")


def _symbol(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.45:
        return rng.choice(LATIN)
    if roll < 0.75:
        return rng.choice(GREEK)
    if roll < 0.9:
        return rng.choice(UPPER)
    accent = rng.choice(ACCENTS)
    base = rng.choice(UPPER) if accent == r"\mathcal" else rng.choice(LATIN)
    return f"{accent}{{{base}}}"


def _number(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.6:
        return str(rng.randint(2, 9))
    if roll < 0.85:
        return str(rng.randint(10, 128))
    return f"{rng.randint(0, 9)}.{rng.randint(1, 99):02d}"


def atom(rng: random.Random, allow_number: bool = True) -> str:
    """A symbol, possibly with a subscript and/or superscript, or a number (not as a left-hand side)."""
    if allow_number and rng.random() < 0.2:
        return _number(rng)
    base = _symbol(rng)
    if rng.random() < 0.4:
        base += (
            "_{"
            + rng.choice(
                (
                    rng.choice(INDICES),
                    _number(rng)[:1],
                    f"{rng.choice(INDICES)}{rng.choice(INDICES)}",
                    f"{rng.choice(INDICES)}+1",
                )
            )
            + "}"
        )
    if rng.random() < 0.3:
        base += "^{" + rng.choice(("2", "3", "-1", "T", "n", r"\prime", "k", "2n")) + "}"
    return base


def expression(rng: random.Random, depth: int, display: bool) -> str:
    """An expression tree of at most ``depth`` nested constructs, rendered as LaTeX."""
    if depth <= 0:
        return atom(rng)
    roll = rng.random()
    if roll < 0.3:
        terms = [expression(rng, depth - 1, display) for _ in range(rng.randint(2, 3))]
        out = terms[0]
        for term in terms[1:]:
            op = rng.choice(BINARY)
            out += f" {op} {term}" if op else f" {term}"
        return out
    if roll < 0.45:
        return rf"\frac{{{expression(rng, depth - 1, display)}}}{{{expression(rng, depth - 1, display)}}}"
    if roll < 0.53:
        index = f"[{rng.randint(3, 4)}]" if rng.random() < 0.2 else ""
        return rf"\sqrt{index}{{{expression(rng, depth - 1, display)}}}"
    if roll < 0.63:
        inner = expression(rng, depth - 1, display)
        left, right = rng.choice(
            (
                (r"\left(", r"\right)"),
                (r"\left[", r"\right]"),
                (r"\left|", r"\right|"),
                (r"\left\|", r"\right\|"),
            )
        )
        if not display:
            # Growing delimiters around inline fractions would push into the neighbouring lines.
            left, right = left.removeprefix(r"\left"), right.removeprefix(r"\right")
        power = "^{" + rng.choice(("2", "p", "-1", r"\frac{1}{2}")) + "}" if rng.random() < 0.4 else ""
        return f"{left} {inner} {right}{power}"
    if roll < 0.73:
        func = rng.choice(FUNCTIONS)
        if func in (r"\max", r"\min"):
            return f"{func}_{{{rng.choice(INDICES)}}} {expression(rng, depth - 1, display)}"
        left, right = (r"\left(", r"\right)") if display else ("(", ")")
        return rf"{func} {left} {expression(rng, depth - 1, display)} {right}"
    if roll < 0.85:
        return big_operator(rng, depth - 1, display)
    if roll < 0.92:
        var = rng.choice(("n", "t", "x", "k"))
        target = rng.choice((r"\infty", "0", "1"))
        return rf"\lim_{{{var} \to {target}}} {expression(rng, depth - 1, display)}"
    return atom(rng)


def big_operator(rng: random.Random, depth: int, display: bool) -> str:
    """A sum, product or integral with limits around a sub-expression."""
    body = expression(rng, depth, display)
    kind = rng.choice(("sum", "sum", "prod", "int", "int", "oint"))
    if kind in ("sum", "prod"):
        index = rng.choice(INDICES)
        upper = rng.choice(("n", "N", "K", "T", r"\infty", "m"))
        return rf"\{kind}_{{{index}=1}}^{{{upper}}} {body}"
    var = rng.choice(("x", "t", "s", "u", r"\tau"))
    if kind == "oint":
        return rf"\oint_{{{rng.choice(CONTOURS)}}} {body} \, d{var}"
    low, high = rng.choice((("0", "1"), ("0", r"\infty"), ("-\\infty", r"\infty"), ("a", "b"), ("0", "T")))
    return rf"\int_{{{low}}}^{{{high}}} {body} \, d{var}"


def inline_formula(rng: random.Random) -> str:
    """A short formula for running text: a relation or a single term, shallow so lines stay even."""
    roll = rng.random()
    if roll < 0.35:
        return atom(rng)
    if roll < 0.5:
        return f"{atom(rng)} \\in {rng.choice(SETS)}"
    lhs = atom(rng, allow_number=False)
    return f"{lhs} {rng.choice(RELATIONS)} {expression(rng, rng.choice((1, 1, 2)), display=False)}"


def _matrix(rng: random.Random) -> str:
    env = rng.choice(("pmatrix", "bmatrix", "vmatrix"))
    rows, cols = rng.randint(2, 3), rng.randint(2, 3)
    body = ROW_BREAK.join(
        " & ".join(atom(rng) if rng.random() < 0.7 else "0" for _ in range(cols)) for _ in range(rows)
    )
    return rf"\begin{{{env}}} {body} \end{{{env}}}"


def display_formula(rng: random.Random) -> str:
    """A displayed equation: a relation between expressions, a matrix identity, cases or an aligned derivation."""
    roll = rng.random()
    if roll < 0.12:
        return f"{rng.choice(UPPER)} = {_matrix(rng)}"
    if roll < 0.22:
        func = f"{rng.choice('fgh')}({rng.choice('xtu')})"
        branches = []
        for _ in range(rng.randint(2, 3)):
            condition = f"{rng.choice('xtu')} {rng.choice(CONDITIONS)} {_number(rng)}"
            branches.append(f"{expression(rng, 1, True)} & \\text{{if }} {condition}")
        branches[-1] = branches[-1].split(" & ")[0] + r" & \text{otherwise}"
        return rf"{func} = \begin{{cases}} {ROW_BREAK.join(branches)} \end{{cases}}"
    if roll < 0.32:
        lines = [f"{atom(rng, allow_number=False)} & = {expression(rng, 2, True)}"]
        lines += [f"& {rng.choice(RELATIONS)} {expression(rng, 2, True)}" for _ in range(rng.randint(1, 2))]
        return rf"\begin{{aligned}} {ROW_BREAK.join(lines)} \end{{aligned}}"
    lhs = expression(rng, 1, True) if rng.random() < 0.3 else atom(rng, allow_number=False)
    return f"{lhs} {rng.choice(RELATIONS)} {expression(rng, rng.choice((2, 2, 3)), display=True)}"

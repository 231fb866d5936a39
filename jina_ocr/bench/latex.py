"""LaTeX in OCR output: find the equations, canonicalise them, check their structure.

Used by the math unit test (exact match, then the normalised rule when no renderer is present),
by the formula edit distance of the page metrics, and by the reward's formula and structure terms.
The canonical form is a token sequence that ignores what does not change the rendering (spacing,
``\\left``/``\\right`` sizing, braces around a single token, ``\\dfrac`` vs ``\\frac``) and repairs
unbalanced braces the way a forgiving reader would, so a broken brace is charged once, to the
structure check, and not a second time to the formula comparison.
"""

from __future__ import annotations

import re

# Order matters: olmOCR-Bench extracts \( \), then \[ \], then $$ $$, then $ $, removing each kind
# before looking for the next so that "$$x$$" is not also read as two "$" equations.
_DELIMITERS = (
    re.compile(r"\\\((.+?)\\\)", re.DOTALL),
    re.compile(r"\\\[(.+?)\\\]", re.DOTALL),
    re.compile(r"\$\$(.+?)\$\$", re.DOTALL),
    re.compile(r"\$(.+?)\$", re.DOTALL),
)


def extract_equations(markdown: str, dollars: bool = True) -> list[str]:
    """Every delimited equation in the text, stripped, in delimiter order then text order.

    ``dollars=False`` reads only ``\\( \\)`` and ``\\[ \\]``, for a math test that sets
    olmOCR-Bench's ``ignore_dollar_delimited``.
    """
    equations: list[str] = []
    rest = markdown
    for pattern in _DELIMITERS if dollars else _DELIMITERS[:2]:
        equations.extend(match.strip() for match in pattern.findall(rest))
        rest = pattern.sub(" ", rest)
    return [equation for equation in equations if equation]


def remove_equations(markdown: str) -> str:
    """The text with every delimited equation removed (what remains is prose for edit distance)."""
    for pattern in _DELIMITERS:
        markdown = pattern.sub(" ", markdown)
    return markdown


_TOKEN = re.compile(r"\\[A-Za-z]+\*?|\\.|\s+|.", re.DOTALL)
_DROPPED = frozenset(
    r"\, \; \: \! \> \quad \qquad \left \right \middle \big \Big \bigg \Bigg \bigl \bigr \Bigl \Bigr "
    r"\biggl \biggr \Biggl \Biggr \displaystyle \textstyle \scriptstyle \limits \nolimits".split()
    + ["\\ "]
)
_ALIASES = {
    r"\dfrac": r"\frac",
    r"\tfrac": r"\frac",
    r"\le": r"\leq",
    r"\ge": r"\geq",
    r"\ne": r"\neq",
    r"\to": r"\rightarrow",
    r"\gets": r"\leftarrow",
    r"\lbrace": r"\{",
    r"\rbrace": r"\}",
    r"\vert": "|",
    r"\lvert": "|",
    r"\rvert": "|",
    r"\cdotp": r"\cdot",
}


def tokens(latex: str) -> list[str]:
    """LaTeX split into commands, escaped symbols and single characters, whitespace dropped."""
    return [tok for tok in _TOKEN.findall(latex) if not tok.isspace()]


def canonical_tokens(latex: str) -> list[str]:
    """The token sequence of :func:`canonical`, for comparisons that want tokens, not characters."""
    # Build the brace tree, repairing as we go: a stray "}" is dropped, an unclosed "{" is closed
    # at the end.
    root: list = []
    stack = [root]
    for tok in tokens(latex):
        tok = _ALIASES.get(tok, tok)
        if tok in _DROPPED:
            continue
        if tok == "{":
            group: list = []
            stack[-1].append(group)
            stack.append(group)
        elif tok == "}":
            if len(stack) > 1:
                stack.pop()
        else:
            stack[-1].append(tok)
    out: list[str] = []

    def emit(items: list, top: bool) -> None:
        # Braces around a single token change nothing in the rendering (x^{2} is x^2).
        if not top and len(items) == 1 and not isinstance(items[0], list):
            out.append(items[0])
            return
        if not top:
            out.append("{")
        for item in items:
            if isinstance(item, list):
                emit(item, False)
            else:
                out.append(item)
        if not top:
            out.append("}")

    emit(root, True)
    return out


def canonical(latex: str) -> str:
    """A canonical spelling of an equation: tokens joined by single spaces (see module docstring)."""
    return " ".join(canonical_tokens(latex))


def equivalent(reference: str, hypothesis: str) -> bool:
    """The normalised-LaTeX rule: the canonical reference equals, or occurs inside, the hypothesis.

    Containment mirrors olmOCR-Bench's rendered check, which accepts a hypothesis whose MathML
    contains the reference's (an equation written together with its number, for instance). A
    hypothesis with unbalanced braces or environments never matches, as KaTeX would refuse to
    render it.
    """
    if structure_errors(hypothesis):
        return False
    ref, hyp = canonical(reference), canonical(hypothesis)
    if not ref:
        return False
    return ref == hyp or f" {ref} " in f" {hyp} "


_ENV = re.compile(r"\\(begin|end)\s*\{([^}]*)\}")


def structure_errors(latex: str) -> list[str]:
    """What is structurally wrong with one equation: unbalanced braces, ``\\left``/``\\right`` or environments."""
    errors = []
    depth = 0
    for tok in tokens(latex):
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth < 0:
                errors.append("'}' without a matching '{'")
                depth = 0
    if depth > 0:
        errors.append(f"{depth} unclosed '{{'")
    toks = tokens(latex)
    lefts, rights = toks.count(r"\left"), toks.count(r"\right")
    if lefts != rights:
        errors.append(f"{lefts} \\left but {rights} \\right")
    open_envs: list[str] = []
    for kind, name in _ENV.findall(latex):
        if kind == "begin":
            open_envs.append(name)
        elif open_envs and open_envs[-1] == name:
            open_envs.pop()
        else:
            errors.append(f"\\end{{{name}}} without a matching \\begin")
    errors.extend(f"\\begin{{{name}}} is never ended" for name in open_envs)
    return errors

"""Deterministic prose for synthetic pages: titles, headings, sentences, list items, running heads.

Everything comes from built-in word lists through a caller's ``random.Random``, so a page seed
fixes every word and nothing is downloaded. The vocabulary is technical on purpose (the pages imitate
papers, reports and manuals) and large enough that two pages practically never share a sentence: the
unit tests of one page must fail on another page's text, and that only holds if sentences are unique.
"""

from __future__ import annotations

import random

NOUNS = tuple(
    """
    algorithm estimator boundary coefficient distribution gradient kernel lattice manifold operator
    parameter partition residual sample sequence spectrum tensor threshold variance vector network
    model dataset baseline benchmark channel cluster constraint decoder encoder embedding feature
    filter signal measurement experiment protocol reactor membrane catalyst polymer crystal sensor
    turbine circuit oscillator amplifier bearing valve compressor pipeline scheduler buffer cache
    compiler interface ledger portfolio contract revenue margin inventory forecast survey cohort
    trial dosage biomarker genome protein enzyme neuron cortex tissue watershed sediment aquifer
    glacier climate emission reservoir harvest yield fertilizer lens detector photon plasma magnet
    antenna waveguide substrate alloy weld beam truss flange solver mesh iteration objective
    penalty prior posterior likelihood regression classifier attention layer token vocabulary
    corpus annotation simulation trajectory controller actuator payload orbit satellite telescope
    """.split()
)
ADJECTIVES = tuple(
    """
    adaptive asymptotic bounded canonical compact convex discrete dominant empirical finite global
    harmonic implicit linear local marginal nonlinear normalized optimal orthogonal periodic
    quadratic random recursive robust scalar sparse stable stochastic symmetric thermal uniform
    weighted latent residual spectral temporal spatial hierarchical multiscale coarse fine
    preliminary baseline calibrated corrected annual quarterly regional clinical structural
    electrical mechanical chemical optical acoustic magnetic viscous turbulent laminar porous
    elastic brittle ductile dense shallow deep narrow broad efficient redundant distributed
    parallel sequential conditional joint
    """.split()
)
VERBS = tuple(
    """
    improves reduces dominates approximates constrains determines estimates exceeds governs
    increases limits maps minimizes maximizes modulates predicts preserves regularizes replaces
    samples separates stabilizes transforms updates yields outperforms captures encodes accelerates
    degrades supports controls measures balances absorbs amplifies filters couples
    """.split()
)
ADVERBS = tuple(
    "consistently|significantly|marginally|rapidly|slowly|uniformly|locally|globally|almost surely|"
    "in practice|by construction|in expectation|on average|under mild assumptions|in most settings|"
    "without exception|for large samples".split("|")
)
PREPOSITIONS = ("across", "under", "within", "over", "along", "against", "beyond", "through", "near", "for")
OPENERS = tuple(
    "In this section|As shown below|For completeness|In contrast|Consequently|Moreover|Furthermore|"
    "In particular|On the other hand|Taken together|To this end|Empirically|In the second experiment|"
    "By comparison|Unlike prior work|Notably".split("|")
)
SURNAMES = tuple(
    """
    Okafor Lindqvist Tanaka Moreau Castillo Novak Haddad Brennan Iyer Kowalski Fischer Oyelaran
    Petrov Santos Nakamura Duarte Weber Amsel Rahman Ferreira
    """.split()
)
INITIALS = "ABCDEFGHJKLMNPRSTVW"
VENUES = tuple(
    "Journal of Applied Computation|Proceedings of the Workshop on Numerical Methods|"
    "Annual Report on Materials Testing|Transactions on Signal Analysis|Technical Note Series|"
    "Review of Process Engineering|Bulletin of Environmental Monitoring|Internal Design Document|"
    "Letters in Statistical Learning|Clinical Methods Quarterly".split("|")
)
SECTION_TOPICS = tuple(
    "Introduction|Related Work|Problem Setting|Method|Experimental Setup|Results|Discussion|"
    "Ablation Study|Error Analysis|Implementation Details|Limitations|Theoretical Analysis|"
    "Data Collection|Evaluation Protocol|Background|Conclusion".split("|")
)


def plural(noun: str) -> str:
    """English plural of a vocabulary noun (the vocabulary avoids irregular ones beyond these rules)."""
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    if noun.endswith("um"):
        return noun[:-2] + "a"
    return noun + "s"


def noun_phrase(rng: random.Random) -> str:
    """An optionally modified noun: "the sparse estimator", "each kernel"."""
    det = rng.choice(("the", "the", "a", "each", "every", "this", "our"))
    words = [rng.choice(ADJECTIVES) for _ in range(rng.choice((0, 1, 1, 2)))]
    noun = rng.choice(NOUNS)
    if det == "a" and (words[0] if words else noun)[0] in "aeiou":
        det = "an"
    return " ".join([det, *words, noun])


def sentence(rng: random.Random) -> str:
    """One declarative sentence of roughly 8 to 25 words, capitalised and ending in a full stop."""
    parts = []
    if rng.random() < 0.3:
        parts.append(rng.choice(OPENERS) + ",")
    parts += [noun_phrase(rng), rng.choice(ADVERBS) if rng.random() < 0.3 else "", rng.choice(VERBS)]
    parts.append(noun_phrase(rng))
    if rng.random() < 0.6:
        parts += [rng.choice(PREPOSITIONS), noun_phrase(rng)]
    if rng.random() < 0.25:
        parts += ["when", noun_phrase(rng), rng.choice(VERBS), noun_phrase(rng)]
    text = " ".join(p for p in parts if p)
    return text[0].upper() + text[1:] + "."


def title(rng: random.Random) -> str:
    """A document title in title case."""
    shapes = (
        "{A} {N} for {A} {N}",
        "On the {A} {N} of {A} {P}",
        "{A} {P}: A Study of {A} {N}",
        "Towards {A} {N} with {A} {P}",
        "Measuring the {N} of {A} {P}",
    )
    shape = rng.choice(shapes)
    makers = {"{A}": ADJECTIVES, "{N}": NOUNS, "{P}": tuple(plural(n) for n in NOUNS)}
    for slot, words in makers.items():
        while slot in shape:
            shape = shape.replace(slot, rng.choice(words).title(), 1)
    return shape


def heading(rng: random.Random, number: str) -> str:
    """A numbered section heading such as "3.2 Results on the sparse kernel"."""
    if rng.random() < 0.5:
        text = rng.choice(SECTION_TOPICS)
        if rng.random() < 0.6:
            text += f" for {rng.choice(ADJECTIVES)} {plural(rng.choice(NOUNS))}"
    else:
        text = f"{rng.choice(ADJECTIVES).capitalize()} {rng.choice(NOUNS)} {rng.choice(('analysis', 'design', 'estimation', 'results', 'setup'))}"
    return f"{number} {text}" if number else text


def authors(rng: random.Random) -> str:
    """An author line: initials and surnames, comma separated."""
    names = rng.sample(SURNAMES, rng.randint(2, 4))
    return ", ".join(f"{rng.choice(INITIALS)}. {name}" for name in names)


def list_item(rng: random.Random) -> str:
    """A short list entry: a clause without a subject or a full sentence."""
    if rng.random() < 0.5:
        text = f"{rng.choice(VERBS)} {noun_phrase(rng)} {rng.choice(PREPOSITIONS)} {noun_phrase(rng)}"
        return text[0].upper() + text[1:] + rng.choice((".", ";", ""))
    return sentence(rng)


def running_head(rng: random.Random) -> str:
    """A page header of the kind the model must leave out of its transcription."""
    volume, issue = rng.randint(3, 58), rng.randint(1, 12)
    return f"{rng.choice(VENUES)}, Vol. {volume}, No. {issue} ({rng.randint(1994, 2025)})"

"""Rendered math comparison (KaTeX in Chromium): runs where .ci/deps/bench.sh installed both."""

from __future__ import annotations

import pytest

from jina_ocr.bench import katex
from jina_ocr.bench.olmocr import evaluate
from jina_ocr.bench.scoring import score_outputs

EQUATIONS = [
    r"a^{2}+b^{2}=c^{2}",
    r"a^2+b^2=c^2",
    r"a^2+b^2=c^3",
    r"x_1^2",
    r"x^2_1",
    r"\frac{1}{2}",
    r"\frac12",
    r"\frac{2}{1}",
    r"e^{i\pi}+1=0 \quad (3)",
    r"e^{i \pi}+1=0",
    r"\frac{1}{2",
]


@pytest.fixture(scope="module")
def rendered():
    renderer = katex.default_renderer()
    if renderer is None:
        pytest.skip(
            "KaTeX rendering needs chromium and the katex npm package (.ci/deps/bench.sh installs both)"
        )
    return renderer, renderer.render_many(EQUATIONS)


@pytest.mark.parametrize(
    ("reference", "hypothesis", "same"),
    [
        (r"a^{2}+b^{2}=c^{2}", r"a^2+b^2=c^2", True),
        (r"a^{2}+b^{2}=c^{2}", r"a^2+b^2=c^3", False),
        (r"x_1^2", r"x^2_1", True),
        (r"\frac{1}{2}", r"\frac12", True),
        (r"\frac{1}{2}", r"\frac{2}{1}", False),
        # The reference occurring inside a longer rendering (an equation number) still counts.
        (r"e^{i \pi}+1=0", r"e^{i\pi}+1=0 \quad (3)", True),
    ],
)
def test_same_rendering(rendered, reference, hypothesis, same):
    _, renderings = rendered
    assert katex.same_rendering(renderings[reference], renderings[hypothesis]) is same


def test_invalid_latex_does_not_render(rendered):
    _, renderings = rendered
    assert renderings[r"\frac{1}{2"] is None
    assert len(renderings[r"\frac{1}{2}"].glyphs) == 2


def test_math_test_uses_renderer_and_scorer_reports_method(rendered, tmp_path):
    renderer, _ = rendered
    test = {"pdf": "m.pdf", "page": 1, "id": "m", "type": "math", "math": r"\frac{1}{2}"}
    passed, _, method = evaluate(test, r"Half is $\frac12$.", renderer=renderer)
    assert passed and method == "katex"
    (tmp_path / "m_pg1_repeat1.md").write_text(r"Half is $\frac12$.")
    score = score_outputs([test], tmp_path, renderer=renderer, baselines="none")
    assert score.results[0].passed and score.math_fallback == []


def test_fixture_math_tests_pass_by_rendering(rendered, fixtures_dir):
    from jina_ocr.bench.latex import extract_equations
    from jina_ocr.bench.olmocr import load_tests

    renderer, _ = rendered
    page = r"""$$e^{i\pi} + 1 = 0$$ and $$a^2 + b^2 = c^2$$ and
$$\int_a^b f(x)\,dx = F(b) - F(a)$$ and $$\nabla\times\mathbf E = -\frac{\partial\mathbf B}{\partial t}$$"""
    math_tests = [t for t in load_tests(fixtures_dir / "olmocr" / "tests.jsonl") if t["type"] == "math"]
    assert len(math_tests) == 4
    # One browser start for everything below, as the scorer does.
    wrong = page.replace("=", "<")
    renderer.render_many([t["math"] for t in math_tests] + extract_equations(page) + extract_equations(wrong))
    for test in math_tests:
        passed, why, method = evaluate(test, page, renderer=renderer)
        assert passed and method == "katex", (test["math"], why)
        assert not evaluate(test, wrong, renderer=renderer)[0]


def line(text: str, y: float = 100.0, x0: float = 0.0) -> list[katex.Glyph]:
    return [katex.Glyph(ch, x0 + 12.0 * k, y) for k, ch in enumerate(text)]


def test_glyph_matching_without_a_browser():
    # x^2 (the 2 raised) against x_2 (the 2 lowered) and x2 (same baseline): same characters,
    # different neighbourhoods.
    sup = katex.Rendering("", (katex.Glyph("x", 0, 100), katex.Glyph("2", 12, 90)))
    sub = katex.Rendering("", (katex.Glyph("x", 0, 100), katex.Glyph("2", 12, 110)))
    flat = katex.Rendering("", tuple(line("x2")))
    assert katex.same_rendering(sup, sup) and katex.same_rendering(flat, flat)
    assert not katex.same_rendering(flat, sup) and not katex.same_rendering(flat, sub)
    # Extra glyphs elsewhere in the hypothesis do not matter; a different glyph does.
    wider = katex.Rendering("", tuple(line("a+b=c") + line("(1)", y=300)))
    assert katex.same_rendering(katex.Rendering("", tuple(line("a+b=c"))), wider)
    assert not katex.same_rendering(katex.Rendering("", tuple(line("a+b=d"))), wider)
    # MathML containment decides before any glyph is looked at.
    assert katex.same_rendering(
        katex.Rendering("<mi>x</mi>", ()), katex.Rendering("<mrow><mi>x</mi></mrow>", ())
    )


def test_glyph_matching_handles_long_equations():
    long = katex.Rendering("", tuple(line("ab+" * 400)))  # deeper than the recursion limit
    assert katex.same_rendering(long, long)

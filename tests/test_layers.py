"""The import graph of ``jina_ocr``, read from the source with ``ast``: no cycles, layers point down, and
the model package stands alone.

Every ``import`` and ``from ... import`` counts, those inside functions included: a lazy import only
moves a cycle or an upward dependency to run time, where it fails in whichever order modules happen to
load. The layers (docs: DESIGN.md, "Layout")::

    commands, cli, the jina_ocr package itself   (what users run and import)
    services                                     (conversion, server, endpoints, fetch)
    runtime, loading, model_files, generation_defaults
    the model package (jina_ocr.remote_code: the root *_jina_ocr.py files and generation/),
    jina_ocr.errors and jina_ocr.models          (usable by all)

A module imports only its own layer or lower ones; the layers below the commands import nothing from
the other tools (train, synth, export, bench, vllm, ...), and inference (the layers below the commands,
``jina-ocr convert`` and ``jina-ocr serve``) does not reach train, synth or export even through other
modules. The model package ships to the Hub, where ``jina_ocr`` does not exist: it imports nothing
from it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL_PACKAGE = "jina_ocr.remote_code"

LAYERS = {
    MODEL_PACKAGE: 0,
    "jina_ocr.errors": 0,
    "jina_ocr.models": 0,
    "jina_ocr.runtime": 1,
    "jina_ocr.loading": 1,
    "jina_ocr.model_files": 1,
    "jina_ocr.quantization": 1,
    "jina_ocr.quantized_weights": 1,
    "jina_ocr.generation_defaults": 1,
    "jina_ocr.services": 2,
    "jina_ocr.commands": 3,
    "jina_ocr.cli": 3,
    "jina_ocr": 3,  # the package itself: jina_ocr.convert and jina_ocr.load for users
}
TOP = 3
LAYER_NAMES = {0: "the model package", 1: "runtime/loading", 2: "services", 3: "the commands"}

INFERENCE_COMMANDS = ("jina_ocr.commands.convert", "jina_ocr.commands.serve")
TRAINING_TOOLS = ("jina_ocr.train", "jina_ocr.synth", "jina_ocr.export")


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``source`` imports ``target`` at ``where`` (file:line)."""

    source: str
    target: str
    where: str

    def __str__(self) -> str:
        return f"{self.where}: {self.source} imports {self.target}"


def _module_files() -> dict[str, Path]:
    """Module name -> file, as installed: jina_ocr/ as is, the root files and generation/ as the model
    package (pyproject.toml maps them to jina_ocr.remote_code)."""
    files = {}
    sources = [(path, path.relative_to(REPO).with_suffix("").parts) for path in REPO.glob("jina_ocr/**/*.py")]
    for path in [*REPO.glob("*.py"), *REPO.glob("generation/*.py")]:
        sources.append((path, (*MODEL_PACKAGE.split("."), *path.relative_to(REPO).with_suffix("").parts)))
    for path, parts in sources:
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    return files


def _imports(name: str, path: Path, modules: set[str]) -> list[Import]:
    """Every import in ``path`` of a ``jina_ocr`` module, relative ones resolved; ``from a import b``
    names module ``a.b`` when there is one, else ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                for alias in node.names
            ]
        else:
            continue
        where = f"{path.relative_to(REPO)}:{node.lineno}"
        edges.extend(Import(name, target, where) for target in targets if _in_jina_ocr(target))
    return edges


def _in_jina_ocr(module: str) -> bool:
    return module == "jina_ocr" or module.startswith("jina_ocr.")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _layer(module: str) -> int | None:
    """The layer of ``module`` (its longest listed prefix), or None for the tools outside the layers."""
    prefixes = [prefix for prefix in LAYERS if _within(module, prefix)]
    return LAYERS[max(prefixes, key=len)] if prefixes else None


def import_graph() -> dict[str, list[Import]]:
    """Module -> its imports of ``jina_ocr`` modules (an import of a name the index lacks, such as a
    misspelt module, points at the name as written)."""
    files = _module_files()
    return {name: _imports(name, path, set(files)) for name, path in sorted(files.items())}


def find_cycle(graph: dict[str, list[Import]]) -> list[Import] | None:
    """The edges of one import cycle, or None: a depth-first search that meets a module still on its path."""
    state: dict[str, str] = {}  # "open" while on the path, "done" once every import below it is explored
    path: list[Import] = []

    def visit(module: str) -> list[Import] | None:
        state[module] = "open"
        for edge in graph.get(module, []):
            if state.get(edge.target) == "open":
                start = next((i for i, e in enumerate(path) if e.source == edge.target), len(path))
                return [*path[start:], edge]
            if edge.target not in state:
                path.append(edge)
                found = visit(edge.target)
                if found:
                    return found
                path.pop()
        state[module] = "done"
        return None

    for module in graph:
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def upward_imports(graph: dict[str, list[Import]]) -> list[str]:
    """Imports that break the layering, each with the reason."""
    problems = []
    for module, edges in graph.items():
        layer = _layer(module)
        if layer is None or layer == TOP:
            continue
        for edge in edges:
            target = _layer(edge.target)
            if target is None:
                problems.append(f"{edge}: {LAYER_NAMES[layer]} imports a tool outside the layers")
            elif target > layer:
                problems.append(f"{edge}: {LAYER_NAMES[layer]} imports {LAYER_NAMES[target]}, a higher layer")
    return problems


def training_reached(graph: dict[str, list[Import]], start: str) -> list[Import] | None:
    """The chain of imports from ``start`` to train, synth or export, or None (breadth first, so the
    shortest chain)."""
    reached_by: dict[str, Import | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for edge in graph.get(module, []):
                if edge.target in reached_by:
                    continue
                reached_by[edge.target] = edge
                if any(_within(edge.target, tool) for tool in TRAINING_TOOLS):
                    chain = [edge]
                    while (previous := reached_by[chain[0].source]) is not None:
                        chain.insert(0, previous)
                    return chain
                following.append(edge.target)
        frontier = following
    return None


def _chain(edges: list[Import]) -> str:
    return "\n  ".join(str(edge) for edge in edges)


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    if cycle:
        pytest.fail("import cycle:\n  " + _chain(cycle), pytrace=False)


def test_layers_only_point_down():
    problems = upward_imports(import_graph())
    if problems:
        pytest.fail("imports against the layers:\n  " + "\n  ".join(problems), pytrace=False)


def test_inference_never_reaches_train_synth_or_export():
    graph = import_graph()
    inference = [m for m in graph if _layer(m) in (1, 2) or m in INFERENCE_COMMANDS]
    assert "jina_ocr.services.conversion" in inference and "jina_ocr.commands.serve" in inference
    chains = {module: training_reached(graph, module) for module in inference}
    found = [
        f"{module}:\n    " + _chain(chain).replace("\n  ", "\n    ")
        for module, chain in chains.items()
        if chain
    ]
    if found:
        pytest.fail("inference reaches training code:\n  " + "\n  ".join(found), pytrace=False)


def test_the_model_package_imports_nothing_from_jina_ocr():
    graph = import_graph()
    package = [m for m in graph if _within(m, MODEL_PACKAGE)]
    assert "jina_ocr.remote_code.modeling_jina_ocr" in package
    assert "jina_ocr.remote_code.generation.dispatch" in package
    leaks = [
        str(edge) for module in package for edge in graph[module] if not _within(edge.target, MODEL_PACKAGE)
    ]
    if leaks:
        pytest.fail(
            "the model package ships to the Hub without jina_ocr, yet:\n  " + "\n  ".join(leaks),
            pytrace=False,
        )


def test_the_graph_sees_lazy_and_relative_imports():
    """The reader itself: an import inside a function counts, and relative imports resolve."""
    graph = import_graph()
    edges = {(edge.source, edge.target) for module in graph for edge in graph[module]}
    assert ("jina_ocr", "jina_ocr.services.conversion") in edges  # inside __getattr__
    assert ("jina_ocr.remote_code.generation.dispatch", "jina_ocr.remote_code.compat_jina_ocr") in edges
    assert ("jina_ocr.remote_code.modeling_jina_ocr", "jina_ocr.remote_code.generation.dispatch") in edges

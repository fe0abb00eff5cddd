"""The package's layering (ARCHITECTURE.md), checked on the source: the import graph of raylc
(every ``import``, also inside functions; ``if TYPE_CHECKING:`` blocks excluded) has no
cycle, the run layer imports no family, the families reach the run layer only through the
Run they are given, and nothing branches on a suite's kind list."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "raylc"


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


MODULES = {_module(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path) -> set[str]:
    """The raylc modules ``path`` imports at run time."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("raylc"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("raylc") and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


GRAPH = {name: {m for m in _imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def _package_edges() -> dict[str, set[str]]:
    """Importing a module runs its packages' ``__init__`` too: an edge to each parent package
    (but not to the module's own packages, which are already importing it)."""
    graph = {name: set(deps) for name, deps in GRAPH.items()}
    for name, deps in GRAPH.items():
        for dep in deps:
            parts = dep.split(".")
            graph[name].update(parent for parent in (".".join(parts[:i]) for i in range(2, len(parts)))
                               if parent != name and not name.startswith(parent + "."))
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` (a list of modules), or [] (an iterative depth-first search)."""
    colour = dict.fromkeys(graph, 0)
    for root in graph:
        if colour[root]:
            continue
        stack = [(root, iter(sorted(graph[root])))]
        path = [root]
        colour[root] = 1
        while stack:
            node, children = stack[-1]
            for child in children:
                if colour.get(child) == 1:
                    return path[path.index(child):] + [child]
                if colour.get(child) == 0:
                    colour[child] = 1
                    stack.append((child, iter(sorted(graph[child]))))
                    path.append(child)
                    break
            else:
                colour[node] = 2
                stack.pop()
                path.pop()
    return []


def test_the_graph_is_read():
    """The checker sees what it should (a broken parser would pass every rule below)."""
    assert "raylc.run.skeleton" in GRAPH["raylc.evaluate"]
    assert "raylc.dolce.stages" in GRAPH["raylc.dolce.evaluation"]
    assert "raylc.suites.registry" in GRAPH["raylc.spec"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    assert _cycle(_package_edges()) == []


def _within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


FAMILIES = ("raylc.dolce", "raylc.sweep")
ABOVE = ("raylc.evaluate", "raylc.compare", "raylc.cli", "raylc.__main__")


@pytest.mark.parametrize("layer, forbidden", [
    # the run layer runs any evaluation: it knows no family and no suite
    (("raylc.run",), (*FAMILIES, "raylc.suites", *ABOVE)),
    # a family sees the run layer only through the Run it is given, and the job only as an object
    (FAMILIES, ("raylc.run", "raylc.spec", *ABOVE)),
    # suites, text, scoring and storage sit below the families and the run layer
    (("raylc.suites", "raylc.text", "raylc.scoring", "raylc.io"),
     (*FAMILIES, "raylc.run", "raylc.spec", "raylc.backends", *ABOVE)),
    (("raylc.backends",), (*FAMILIES, "raylc.run", *ABOVE)),
    (("raylc.spec",), ("raylc.run", "raylc.backends", "raylc.sweep", *ABOVE)),
])
def test_layers(layer, forbidden):
    wrong = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if _within(m, *layer)
                   for d in deps if _within(d, *forbidden))
    assert not wrong, wrong


def test_the_spec_imports_only_the_dolce_options():
    """The job's ``fit`` section is the estimator's own FitOptions; nothing else of a family."""
    assert {d for d in GRAPH["raylc.spec"] if _within(d, *FAMILIES)} == {"raylc.dolce.options"}


def test_no_branching_on_suite_lists():
    """Acceptance 2 of issue 15: no module keeps a list of length suites or probes the suite's
    fields by name."""
    pattern = re.compile(r"LENGTH_SUITES|getattr\(job\.suite")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in PACKAGE.rglob("*.py")
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_flat_modules_are_the_entry_points_only():
    """Every module lives in the package named for its concept; the top level keeps the entry
    points (``evaluate`` runs any job, ``compare`` reads any finished runs) and the job spec."""
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert flat == ["__init__.py", "__main__.py", "cli.py", "compare.py", "evaluate.py", "spec.py"], flat


def test_the_job_spec_loads_no_estimator_or_metric_package():
    """``raylc.dolce`` and ``raylc.scoring`` export their names lazily: loading a job (every CLI
    call, every Ray worker) does not import scipy, rouge-score/nltk or the EM code."""
    import subprocess
    import sys

    code = ("import sys, raylc.spec; print(sorted(m for m in ('scipy', 'nltk', 'rouge_score', 'raylc.dolce.cow', "
            "'raylc.dolce.pig', 'raylc.scoring.metrics', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("package", ["raylc.dolce", "raylc.scoring"])
def test_every_lazy_export_resolves(package):
    import importlib

    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        module.nope  # noqa: B018 -- the attribute access is what must raise


def test_every_break_of_the_promise_benchmark_still_applies():
    """tests/benchmarks/break_promises.py breaks each README promise by one text substitution; a module
    rewritten since would leave its break unapplied (and the promise unchecked) until the benchmark runs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("break_promises", ROOT / "tests" / "benchmarks" / "break_promises.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name, module, text, _, tests in bench.BREAKS:
        assert (ROOT / module).read_text().count(text) == 1, f"{name}: {text!r} is not once in {module}"
        assert all((ROOT / t.split("::")[0]).exists() for t in tests), name

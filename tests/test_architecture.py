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
    assert "raylc.run.runner" in GRAPH["raylc.evaluate"]
    assert "raylc.dolce.stages" in GRAPH["raylc.dolce.evaluation"]
    assert "raylc.suites.registry" in GRAPH["raylc.spec"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    assert _cycle(_package_edges()) == []


def _within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


FAMILIES = ("raylc.dolce", "raylc.sweep")
ABOVE = ("raylc.evaluate", "raylc.compare", "raylc.longscore", "raylc.cli", "raylc.__main__", "raylc.reference")
BELOW_SPEC = ("raylc.backends.registry", "raylc.backends.config")  #: of the backends, what the job spec imports


@pytest.mark.parametrize("layer, forbidden", [
    # the run layer runs any evaluation: it knows no family and no suite
    (("raylc.run",), (*FAMILIES, "raylc.suites", *ABOVE)),
    # a family sees the run layer only through the Run it is given, and the job only as an object
    (FAMILIES, ("raylc.run", "raylc.spec", *ABOVE)),
    # suites, text, scoring and storage sit below the families and the run layer
    (("raylc.suites", "raylc.text", "raylc.scoring", "raylc.io"),
     (*FAMILIES, "raylc.run", "raylc.spec", "raylc.backends", *ABOVE)),
    (("raylc.backends",), (*FAMILIES, "raylc.run", *ABOVE)),
    # the job spec builds its probe's union from the backend registry, which sits below it
    (("raylc.spec",), ("raylc.run", "raylc.sweep", *ABOVE)),
    (BELOW_SPEC, ("raylc.spec", "raylc.run", *FAMILIES, *ABOVE)),
])
def test_layers(layer, forbidden):
    wrong = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if _within(m, *layer)
                   for d in deps if _within(d, *forbidden))
    assert not wrong, wrong


def test_the_spec_imports_only_the_dolce_options_and_the_backend_registry():
    """The job's ``fit`` section is the estimator's own FitOptions; nothing else of a family. Its
    ``probe`` and ``judge`` sections are the configs the backend registry names: the spec holds
    no backend config."""
    assert {d for d in GRAPH["raylc.spec"] if _within(d, *FAMILIES)} == {"raylc.dolce.options"}
    assert {d for d in GRAPH["raylc.spec"] if _within(d, "raylc.backends")} == set(BELOW_SPEC)
    spec = (PACKAGE / "spec.py").read_text(encoding="utf-8")
    assert not re.search(r"^class \w*Probe\b|^PROBES\b", spec, re.M)


def test_no_branching_on_suite_lists():
    """Acceptance 2 of issue 15: no module keeps a list of length suites or probes the suite's
    fields by name."""
    pattern = re.compile(r"LENGTH_SUITES|getattr\(job\.suite")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in PACKAGE.rglob("*.py")
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_flat_modules_are_the_entry_points_only():
    """Every module lives in the package named for its concept; the top level keeps the entry
    points (``evaluate`` runs any job, ``compare`` reads finished runs side by side, ``longscore``
    ranks score tables and runs, ``reference`` writes the reference pages) and the job spec."""
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert flat == ["__init__.py", "__main__.py", "cli.py", "compare.py", "evaluate.py", "longscore.py",
                    "reference.py", "spec.py"], flat


def test_the_job_spec_loads_no_estimator_or_metric_package():
    """``raylc.dolce`` and ``raylc.scoring`` export their names lazily: loading a job (every CLI
    call, every Ray worker) does not import scipy, rouge-score/nltk or the EM code."""
    import subprocess
    import sys

    code = ("import sys, raylc.spec; print(sorted(m for m in ('scipy', 'nltk', 'rouge_score', 'raylc.dolce.cow', "
            "'raylc.dolce.pig', 'raylc.scoring.metrics', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_run_imports_rouge_and_scipy_stats_only_where_it_uses_them():
    """A run's driver and its workers (``raylc.evaluate``, the fit, the pipeline) import neither
    rouge-score (NLTK, scipy.stats: about 1.4 s a process) nor scipy.stats (0.7 s) nor
    scipy.optimize (0.3 s): a ROUGE metric, Spearman's rho and the Dirichlet fit below lambda
    import them when called, and do import them then."""
    import subprocess
    import sys

    heavy = "sorted(m for m in ('nltk', 'rouge_score', 'scipy.stats', 'scipy.optimize') if m in sys.modules)"
    code = ("import sys, raylc.evaluate, raylc.dolce.fit, raylc.run.pipeline, raylc.cli; print(" + heavy + "); "
            "import polars as pl; from raylc.scoring.metrics import rouge_l; "
            "from raylc.dolce.sensitivity import spearman_rho; "
            "print(rouge_l(pl.Series(['a b']), pl.Series([['a b c']])).to_list(), spearman_rho([1, 2, 3], [1, 3, 2])); "
            "print(" + heavy + "); from raylc.dolce.uncertainty import dirichlet_mle; import numpy as np; "
            "print(dirichlet_mle(np.array([[0, 3, 1], [1, 2, 1]])).shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.splitlines() == ["[]", "[0.8] 0.5", "['nltk', 'rouge_score', 'scipy.optimize', 'scipy.stats']",
                                       "(3,)"], out.stdout


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


# --- the run folder is the only door to a run's storage (issue 38, acceptance 1) ----------------

#: who may import the store module: the run folder, and the commands and suites that open the
#: user's own locations (input tables, data files, run folders named on the command line, --out),
#: or check one's address (submit: the cluster's store)
STORE_IMPORTERS = {"raylc.run.folder", "raylc.compare", "raylc.longscore", "raylc.dolce.commands",
                   "raylc.suites.documents", "raylc.suites.context", "raylc.suites.longbench",
                   "raylc.suites.longbench_v2", "raylc.run.submit"}
#: the store's methods that take path parts: a run id among their arguments pairs it with a store
STORE_METHODS = {"path", "uri", "exists", "write_table", "read_table", "parquet_files", "folders", "table_ok",
                 "write_json", "read_json", "write_text", "write_bytes", "delete", "open_input", "open_output",
                 "read_text", "write_outputs"}


def _all_imports(path: Path) -> set[str]:
    """Every raylc module ``path`` imports, ``if TYPE_CHECKING:`` blocks included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update({node.module, *(f"{node.module}.{a.name}" for a in node.names)})
    return found


def test_only_the_run_folder_and_the_readers_of_the_users_files_import_the_store():
    importers = {name for name, path in MODULES.items() if "raylc.io.store" in _all_imports(path)} - {"raylc.io"}
    assert importers == STORE_IMPORTERS, sorted(importers ^ STORE_IMPORTERS)


def _run_id_in(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "run_id" or isinstance(n, ast.Attribute) and n.attr == "run_id"
               for n in ast.walk(node))


def _store_pairs(path: Path) -> set[str]:
    """``file:function`` of every function of ``path`` that takes a Store with a run id, or passes
    a run id to a store's method (``store.read_table(run_id, ...)``, ``run.store.uri(run.run_id)``)."""
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        typed = any(a.annotation is not None and "Store" in ast.unparse(a.annotation) for a in args)
        if typed and any(a.arg == "run_id" for a in args):
            found.add(f"{rel}:{fn.name}")
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            if (isinstance(call.func, ast.Attribute) and call.func.attr in STORE_METHODS
                    and "store" in ast.unparse(call.func.value).lower()
                    and any(_run_id_in(a) for a in [*call.args, *(k.value for k in call.keywords)])):
                found.add(f"{rel}:{fn.name}")
    return found


def test_the_scan_for_store_and_run_id_pairs_finds_them(tmp_path):
    """The scan below sees a pair where there is one (a scan that finds nothing would pass)."""
    code = ("def a(store: Store, run_id: str): ...\n"
            "def b(run):\n    return run.store.read_table(run.run_id, 'x')\n"
            "def c(folder):\n    return folder.read('x')\n"
            "def d(store, run_id):\n    return store.uri(run_id, 'report')\n")
    (tmp_path / "raylc").mkdir()
    (tmp_path / "raylc" / "m.py").write_text(code)
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert _store_pairs(tmp_path / "raylc" / "m.py") == {"raylc/m.py:a", "raylc/m.py:b", "raylc/m.py:d"}
    finally:
        ROOT = saved


def test_no_function_outside_the_run_folder_pairs_a_store_with_a_run_id():
    found = set().union(*(_store_pairs(p) for p in sorted(PACKAGE.rglob("*.py")) if p.name != "folder.py"
                          or p.parent.name != "run"))
    assert not found, sorted(found)


"""The documents against the tree (issue 30 item 4): every ``raylc/``, ``tests/``, ``jobs/`` and
``cluster/`` path written in backticks in README.md, ARCHITECTURE.md, CONTRIBUTING.md and
docs/ (the generated reference included) exists; ARCHITECTURE.md names every module of the
package; README.md stays within 400 lines with a table of contents whose anchors are its headings;
every relative link points to a file that exists (and to a heading of it, when it names one).

The user pages (README.md, docs/) against raylc (issue 39): they hold no issue number or commit
hash (CHANGELOG.md holds the history); every ``raylc ...`` command they show names options raylc
has, parses, and runs in a scratch folder (those needing a cluster, S3 or a real model: their job
validates). Only ``test_documented_runs_run`` starts Ray. The figures of docs/figures.md against
their commands: tests/test_figures_commands.py."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "CHANGELOG.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]  # docs/reference/ too
README_MAX_LINES = 400
#: top-level folders whose paths are checked, and those never checked (run output, model weights)
CHECKED = ("raylc/", "tests/", "jobs/", "cluster/")
IGNORED = ("runs/", ".models/")

_FENCE = re.compile(r"^\s*(```|~~~)")
_SPAN = re.compile(r"(`+)(.+?)\1")
#: a path token inside a code span: starts a word (not ``mutants/raylc/...``), path characters only
_PATH = re.compile(r"(?<![\w./~-])((?:%s)[\w./-]*)" % "|".join(re.escape(p) for p in CHECKED))
_GLOB = re.compile(r"[*?\[\]{}<>]")
_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of the lines outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def code_paths(text: str) -> list[tuple[int, str]]:
    """``(line, path)`` of every checked path inside an inline code span, with a ``::test`` or
    ``:name`` suffix dropped; paths holding a glob or a ``<placeholder>`` are not plain paths."""
    found = []
    for number, line in _prose(text):
        for span in _SPAN.finditer(line):
            code = span.group(2)
            for match in _PATH.finditer(code):
                end = match.end()
                if end < len(code) and _GLOB.match(code[end]):
                    continue  # the path goes on with a glob or placeholder: tests/<package>/...
                path = match.group(1).rstrip(".")
                if not _GLOB.search(path) and not path.startswith(IGNORED):
                    found.append((number, path))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation but ``-`` and ``_``
    removed, spaces as ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a document's headings (a repeated heading gets ``-1``, ``-2``, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose(text):
        match = _HEADING.match(line)
        if match:
            base = slug(match.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(text: str) -> list[tuple[int, str]]:
    """``(line, target)`` of every Markdown link outside code, with code spans masked."""
    out = []
    for number, line in _prose(text):
        masked = _SPAN.sub(lambda m: " " * len(m.group(0)), line)
        out += [(number, m.group(1)) for m in _LINK.finditer(masked)]
    return out


def broken_links(doc: Path) -> list[str]:
    """Relative links of ``doc`` whose file is missing, or whose ``#anchor`` is no heading of it."""
    bad = []
    for number, target in links(doc.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # https:, mailto: ...
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        where = f"{doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc}:{number}: {target}"
        if not file.exists():
            bad.append(f"{where} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
            bad.append(f"{where} (no such heading)")
    return bad


def contents(text: str) -> list[str]:
    """The anchors of the table of contents: the links of the list under a ``Contents`` heading."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"^#{2,3}\s+(table of )?contents\s*$", line, re.I)),
                 None)
    assert start is not None, "no '## Contents' heading"
    out = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        out += re.findall(r"\]\(#([^)]+)\)", line)
    return out


def test_the_checks_can_fail(tmp_path):
    """The checkers find what they should (a broken parser would pass every check below)."""
    text = ("See `raylc/spec.py`, `tests/test_docs.py::test_x`, `tests/cli_runner.py:raylc`, "
            "`python tests/benchmarks/bench_units.py --sizes 1`, `raylc/nope.py`,\n"
            "not `tests/<package>/test_<module>.py`, `infer/task=*/part-*.parquet`, `mutants/raylc/x.py`, "
            "`runs/<run_id>/x`, `raylc/**/*.py`.\n```\n`raylc/in_a_block.py`\n```\n")
    assert [p for _, p in code_paths(text)] == [
        "raylc/spec.py", "tests/test_docs.py", "tests/cli_runner.py", "tests/benchmarks/bench_units.py",
        "raylc/nope.py"]
    assert slug("Job files and `--set`") == "job-files-and---set"
    assert slug("Reading the demo's output") == "reading-the-demos-output"
    assert slug("First real-model results: SmolLM2-135M-Instruct (a tiny model)") == (
        "first-real-model-results-smollm2-135m-instruct-a-tiny-model")
    assert anchors("# A\n## B\n## B\n```\n## C\n```\n") == {"a", "b", "b-1"}
    doc = tmp_path / "doc.md"
    doc.write_text("# T\n\n[ok](#t) [gone](missing.md) [bad](#nope) [web](https://x.org) `[x](y.md)`\n")
    bad = broken_links(doc)
    assert len(bad) == 2 and "missing.md (no such file)" in bad[0] and "#nope (no such heading)" in bad[1], bad
    assert contents("# R\n\n## Contents\n\n- [A](#a)\n  - [B](#b)\n\n## A\n") == ["a", "b"]


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_in_backticks_exists(doc):
    missing = [f"{doc}:{line}: {path}" for line, path in code_paths((ROOT / doc).read_text(encoding="utf-8"))
               if not (ROOT / path).exists()]
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)


def test_architecture_names_every_module():
    named = {path for _, path in code_paths((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))}
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "raylc").rglob("*.py"))
    unnamed = [m for m in modules if m not in named]
    assert not unnamed, "modules ARCHITECTURE.md does not name: " + ", ".join(unnamed)


def test_testing_names_every_benchmark():
    named = {path for _, path in code_paths((ROOT / "docs" / "testing.md").read_text(encoding="utf-8"))}
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "benchmarks").glob("*.py"))
    unnamed = [s for s in scripts if s not in named]
    assert not unnamed, "benchmark scripts docs/testing.md does not name: " + ", ".join(unnamed)


def test_readme_is_short_with_a_table_of_contents():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, f"README.md has {len(text.splitlines())} lines"
    toc = contents(text)
    assert toc and text.find("## Contents") < len(text) // 10, "the table of contents is near the top"
    missing = [a for a in toc if a not in anchors(text)]
    assert not missing, f"contents entries with no heading: {missing}"
    sections = [slug(m.group(2)) for _, line in _prose(text) if (m := _HEADING.match(line)) and m.group(1) == "##"]
    unlisted = [s for s in sections if s not in toc and s != "contents"]
    assert not unlisted, f"sections missing from the contents: {unlisted}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_relative_link_resolves(doc):
    bad = broken_links(ROOT / doc)
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_docs_has_the_pages_the_readme_promises():
    for page in ("testing", "fidelity", "figures", "dolce"):
        assert (ROOT / "docs" / f"{page}.md").is_file(), page


def test_license_is_the_apache_license_pyproject_names():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert re.search(r'^license = "Apache-2.0"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert [line.strip() for line in text.strip().splitlines()[:3]] == [
        "Apache License", "Version 2.0, January 2004", "http://www.apache.org/licenses/"]
    assert "END OF TERMS AND CONDITIONS" in text and "9. Accepting Warranty or Additional Liability." in text


def test_citation_names_the_five_papers_the_readme_lists():
    """CITATION.cff is YAML in Citation File Format 1.2.0 for this version of raylc; its references
    are five papers with a title, a type and authors (anonymous ones named so), and the README's
    References section names the same five titles."""
    import yaml

    import raylc

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert {"message", "title", "authors"} <= cff.keys() and cff["authors"]
    assert str(cff["version"]) == raylc.__version__ and cff["license"] == "Apache-2.0"
    refs = cff["references"]
    assert len(refs) == 5
    for ref in refs:
        assert ref["type"] in ("article", "thesis") and ref["title"] and ref["authors"], ref
        assert all(a.get("family-names") or a.get("name") for a in ref["authors"]), ref
    anonymous = [r["title"] for r in refs if r["authors"] == [{"name": "Anonymous authors"}]]
    assert len(anonymous) == 2 and any(t.startswith("LongBench v2") for t in anonymous)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("\n## References\n"):]
    titles = re.findall(r"^- [^*\n]*\*(.+?)\*", section, re.M)
    assert [t.casefold() for t in titles] == [r["title"].casefold() for r in refs]


# --- the user pages speak of raylc as it is: no issue numbers, no commit hashes ---------------------

#: README.md and every page under docs/ (CHANGELOG.md holds the history)
USER_PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
#: ``#12``, ``issue 29``, ``issue #29``; not another project's ``owner/repo#123`` nor an anchor ``#100-longbench``
_ISSUE = re.compile(r"(?<![\w/.-])#\d+(?![\w-])|\bissues?\s+#?\d+\b", re.I)
#: a word of 7-40 hexadecimal digits (not part of a path, a name or a number with separators)
_HEX = re.compile(r"(?<![\w./:-])[0-9a-f]{7,40}(?![\w/-]|\.\w)")


def _known_commits(words: set[str]) -> set[str]:
    """The ``words`` that name a commit of this repository (none without git or a checkout)."""
    if not words or not (ROOT / ".git").exists():
        return set()
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "cat-file", "--batch-check"], capture_output=True, text=True,
                             input="".join(f"{w}^{{commit}}\n" for w in sorted(words)), timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {w for w, line in zip(sorted(words), out.stdout.splitlines()) if line.split()[1:2] == ["commit"]}


def history_marks(text: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every issue number and commit hash in ``text`` (code blocks included, URLs
    left out): a hash is hexadecimal with both a letter and a digit, or any 7-40 hex digits that
    name a commit of this repository (``1907302``)."""
    lines = [re.sub(r"https?://\S+", " ", line) for line in text.splitlines()]
    words = {m.group(0) for line in lines for m in _HEX.finditer(line)}
    commits = _known_commits({w for w in words if w.isdigit()})
    out = []
    for number, line in enumerate(lines, 1):
        found = [(m.start(), m.group(0)) for m in _ISSUE.finditer(line)]
        found += [(m.start(), w) for m in _HEX.finditer(line)
                  if (w := m.group(0)) in commits or (re.search(r"[a-f]", w) and re.search(r"\d", w))]
        out += [(number, w) for _, w in sorted(found)]
    return out


def test_the_history_check_can_fail():
    text = ("See #12, issue 29 and Issue #30 (commit 6f9be7b, `a1b2c3d4e5`).\n"
            "ray-project/ray#57733, https://github.com/x/y/issues/12#issuecomment-1, [a](#12-b), 1,048,576, 1048576,\n"
            "deadbeefs, facade, 2024-11-26, runs-14bd8b5/x, tests/data/0123abcd.json, `--sizes 32768,1048576`.\n")
    assert history_marks(text) == [(1, "#12"), (1, "issue 29"), (1, "Issue #30"), (1, "6f9be7b"), (1, "a1b2c3d4e5")]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if head.isalnum() and (ROOT / ".git").exists():
        digits = next((head[:n] for n in range(7, 41) if head[:n].isdigit()), None)
        assert [w for _, w in history_marks(f"at {head[:10]}.")] == [head[:10]]
        if digits:  # an all-digit abbreviation of a real commit counts too
            assert [w for _, w in history_marks(f"at {digits}.")] == [digits]


@pytest.mark.parametrize("page", USER_PAGES)
def test_user_pages_hold_no_issue_numbers_or_commit_hashes(page):
    """The history (issues, commits, what an earlier version did) is CHANGELOG.md's."""
    found = [f"{page}:{line}: {word}" for line, word in history_marks((ROOT / page).read_text(encoding="utf-8"))]
    assert not found, "issue numbers or commit hashes (move them to CHANGELOG.md):\n" + "\n".join(found)


def test_the_changelog_is_at_the_top_level():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n") and history_marks(text), "CHANGELOG.md holds the history"


# --- every `raylc ...` command the user pages show runs, or parses and validates ---------------------

_PROGRAM = r"(?:(?:\.venv(?:-real)?/bin/|\$\(REAL\)/)?raylc|python3? -m raylc)"
_CODE_COMMAND = re.compile(rf"^\s*(?:\$\s+)?({_PROGRAM}(?:\s.*)?)$")
_SPAN_COMMAND = re.compile(rf"^({_PROGRAM}\s.*)$")
#: a placeholder: ``<run_id>``, ``[--seed N]``, ``...``, ``JOB.yaml``, ``OBS``, ``a|b``
_PLACEHOLDER = re.compile(r"[<\[]|\.\.\.|\b[A-Z][A-Z0-9_]*\b|\w\|\w")
#: documented commands that need what a test machine has not, with the reason: they are parsed and
#: their job validated, not run
NOT_RUN = {
    "a Ray cluster": lambda args: args[:1] == ["submit"],
    "S3": lambda args: any("s3://" in a for a in args),
    "vLLM's CPU build and a real model": lambda args: any(re.search(r"real-.*smollm2", a) for a in args),
    "the store of a local cluster's job, /tmp/raylc-runs": lambda args: any(a.startswith("/tmp/raylc-runs")
                                                                             for a in args),
}
#: extra settings that keep a documented run small in CI (RAYLC_SLOW=1 runs it as documented)
SMALL = {"jobs/quickstart.yaml": ["suite.problems_per_task=10", "suite.max_units=150"],
         "jobs/helmet-recall.yaml": ["suite.samples_per_length=6"]}


def _unquoted(text: str) -> str:
    return re.sub(r"\"[^\"]*\"|'[^'\s]*'", "\"\"", text)


def doc_commands(text: str) -> list[tuple[int, str]]:
    """``(line, command)`` of every ``raylc ...`` command in ``text``: code lines that start with one
    (a comment after `` # `` dropped; a synopsis's continuation lines, indented and starting with
    ``[``, joined; a trailing backslash joins the next line) and inline code spans that are one.
    Indented code blocks count as code."""
    out, fenced, lines = [], False, text.splitlines()
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        i += 1
        if _FENCE.match(line):
            fenced = not fenced
            continue
        code = fenced or line.startswith("    ")
        match = _CODE_COMMAND.match(re.split(r"\s#\s", line)[0].rstrip()) if code else None
        if match:
            command = match.group(1).strip()
            while i < len(lines) and (command.endswith("\\") or re.match(r"^\s+\[", lines[i])):
                command = command.rstrip("\\").strip() + " " + re.split(r"\s#\s", lines[i])[0].strip()
                i += 1
            out.append((number, command))
        elif not fenced:
            joined = line  # a span that goes on to the next line of the paragraph
            if line.count("`") % 2 and i < len(lines) and lines[i].strip():
                joined += " " + lines[i].strip()
            out += [(number, " ".join(m.group(2).split())) for m in _SPAN.finditer(joined)
                    if m.start() < len(line) and _SPAN_COMMAND.match(" ".join(m.group(2).split()))]
    return out


def _argv(command: str) -> list[str]:
    """The command's arguments, without the program."""
    return shlex.split(re.sub(rf"^{_PROGRAM}\s*", "", command))


def _cli():
    import typer.main

    from raylc.cli import app

    return typer.main.get_command(app)


def _option_names(command) -> set[str]:
    return {name for p in command.params for name in (*p.opts, *p.secondary_opts) if name.startswith("-")}


def synopsis_errors(command: str) -> list[str]:
    """What a command with placeholders names that raylc does not have: its subcommand, or an option
    (``--a/--b`` counts as two) of the subcommand or, before it, of ``raylc`` itself."""
    group = _cli()
    words = _unquoted(re.sub(rf"^{_PROGRAM}\s*", "", command)).replace("[", " ").replace("]", " ").split()
    errors, target = [], group
    for word in words:
        if word.startswith("-") and len(word) > 1:
            for name in word.split("=")[0].split("/"):
                if name not in _option_names(target):
                    errors.append(f"{name} is no option of {'raylc' if target is group else target.name}")
        elif target is group and re.fullmatch(r"[a-z][a-z-]*", word):
            if word not in group.commands:
                errors.append(f"{word} is no raylc command")
                break
            target = group.commands[word]
    return errors


def parse_errors(args: list[str]) -> list[str]:
    """Parsing ``args`` as raylc does, without running anything (types, required arguments)."""
    group = _cli()
    try:
        ctx = group.make_context("raylc", list(args), resilient_parsing=False)
        rest = [a for a in args if a not in ("-v", "--verbose")]
        if not rest:
            return []
        command = group.commands.get(rest[0])
        if command is None:
            return [f"{rest[0]} is no raylc command"]
        command.make_context(rest[0], rest[1:], parent=ctx)
    except Exception as exc:  # click's usage and parameter errors; --version exits 0 while parsing
        return [] if getattr(exc, "exit_code", None) == 0 else [f"{type(exc).__name__}: {exc}"]
    return []


def _job_errors(args: list[str]) -> list[str]:
    """A command's job file and ``--set``/``--store``/``--seed`` validated as ``raylc`` loads them."""
    from raylc.spec import JobSpecError, load_job, parse_overrides

    command = _cli().commands[args[0]]
    params = command.make_context(args[0], args[1:]).params
    if "job_file" not in params:
        return []
    try:
        overrides = parse_overrides(params.get("settings") or [])
        for key, name in (("store.path", "store"), ("seed", "seed")):
            if params.get(name) is not None:
                overrides[key] = params[name]
        load_job(ROOT / params["job_file"], overrides)
    except JobSpecError as exc:
        return [str(exc)]
    return []


def _documented():
    """Every documented command as a pytest param (id ``page:line``)."""
    return [pytest.param(command, id=f"{page}:{line}") for page in USER_PAGES
            for line, command in doc_commands((ROOT / page).read_text(encoding="utf-8"))]


def _concrete(command: str) -> bool:
    """A command to run as it stands: no placeholder, and an argument after the command's name
    (``raylc status`` or ``raylc longscore --no-figures`` in a sentence name a command or an
    option), unless it is ``raylc --version``."""
    if _PLACEHOLDER.search(_unquoted(command)):
        return False
    args = _argv(command)
    return (len(args) >= 2 and not args[1].startswith("-")) or args == ["--version"]


def _needs_ray(args: list[str]) -> bool:
    return args[:1] == ["run"] or any(a.startswith("runs/") for a in args)


def _not_run(args: list[str]) -> Optional[str]:
    return next((why for why, applies in NOT_RUN.items() if applies(args)), None)


DOCUMENTED = _documented()


def test_the_command_finder_can_fail():
    text = ("Run `raylc run jobs/q.yaml --set \"a=[1, 2]\"`, not `raylc/spec.py`; `raylc` or `raylc\nstatus`.\n"
            "```sh\nraylc plan JOB.yaml [--x N]   # a plan\n           [--y N]\nmake demo   # installs raylc\n"
            "ray job submit --address A -- \\\n    python -m raylc run jobs/q.yaml --run-id d\n```\n\n"
            "    .venv/bin/raylc fit OBS --out OUT --no-ray\n")
    assert doc_commands(text) == [(1, 'raylc run jobs/q.yaml --set "a=[1, 2]"'), (1, "raylc status"),
                                  (4, "raylc plan JOB.yaml [--x N] [--y N]"),
                                  (8, "python -m raylc run jobs/q.yaml --run-id d"),
                                  (11, ".venv/bin/raylc fit OBS --out OUT --no-ray")]
    assert [_concrete(c) for _, c in doc_commands(text)] == [True, False, False, True, False]
    assert synopsis_errors("raylc [-v] plan JOB.yaml [--budget-tokens N] [--ray/--no-ray] [--nope X]") == [
        "--ray is no option of plan", "--no-ray is no option of plan", "--nope is no option of plan"]
    assert synopsis_errors("raylc planz JOB.yaml") == ["planz is no raylc command"]
    assert parse_errors(["check"])  # no job file
    assert _job_errors(["run", "jobs/quickstart.yaml", "--seed", "x"])
    assert parse_errors(["--version"]) == [] and parse_errors(["-v", "status", "runs/x"]) == []
    assert _job_errors(["run", "jobs/helmet-recall.yaml", "--set", "suite.lengths=[4096, 8192]"])
    assert _not_run(["submit", "jobs/q.yaml"]) == "a Ray cluster" and _not_run(["run", "jobs/q.yaml"]) is None


def test_the_pages_show_commands_of_every_kind():
    """The finder sees the commands (a broken one would make every test below pass vacuously)."""
    commands = [p.values[0] for p in DOCUMENTED]
    concrete = [c for c in commands if _concrete(c)]
    assert len(commands) >= 80 and len(concrete) >= 8, (len(commands), concrete)
    assert {"run", "check", "longscore", "submit", "--version"} <= {_argv(c)[0] for c in concrete}
    assert [c for c in concrete if _needs_ray(_argv(c)) and not _not_run(_argv(c))], "no documented run runs"


@pytest.mark.parametrize("command", DOCUMENTED)
def test_every_documented_command_names_what_raylc_has(command):
    """A synopsis names a command and options raylc has; a command as it stands also parses, and
    one that is not run here (it needs a cluster, S3 or a real model) has a valid job."""
    errors = synopsis_errors(command)
    if _concrete(command):
        args = _argv(command)
        errors += parse_errors(args)
        if not errors and _not_run(args):
            errors += _job_errors(args)
    assert not errors, f"{command}: " + "; ".join(errors)


def _scratch(tmp_path: Path) -> Path:
    """A folder holding a copy of jobs/, where the documented commands run as from the repository."""
    shutil.copytree(ROOT / "jobs", tmp_path / "jobs")
    return tmp_path


def _run_documented(args: list[str], cwd: Path, small: bool):
    """``raylc *args`` in ``cwd``; a run with ``SMALL``'s settings when ``small``, and its store
    (``./runs`` of the job) named absolutely: the shared Ray session's workers run elsewhere."""
    from cli_runner import raylc

    extra: list[str] = []
    if args[:1] == ["run"]:
        job = next((a for a in args[1:] if a in SMALL), None)
        extra = [x for setting in (SMALL.get(job, []) if small else []) for x in ("--set", setting)]
        extra += [] if "--store" in args else ["--store", str(cwd / "runs")]
    return raylc(*args, *extra, cwd=cwd, env={"COLUMNS": "200"})


@pytest.mark.parametrize("command", [p for p in DOCUMENTED if _concrete(p.values[0])
                                     and not _needs_ray(_argv(p.values[0])) and not _not_run(_argv(p.values[0]))])
def test_documented_commands_without_ray_run(command, tmp_path):
    out = _run_documented(_argv(command), _scratch(tmp_path), small=True)
    assert out.returncode == 0, f"{command}: exit {out.returncode}\n{out.stderr[-2000:]}"
    assert "Traceback" not in out.stderr


@pytest.mark.ray
@pytest.mark.parametrize("small", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_documented_runs_run(ray_session, tmp_path, small):
    """Each documented ``raylc run`` (quickstart-size in CI, as documented with RAYLC_SLOW=1) in one
    scratch folder, then the documented commands that read its runs (``raylc longscore runs/...``)."""
    commands = [p.values[0] for p in DOCUMENTED if _concrete(p.values[0]) and _needs_ray(_argv(p.values[0]))
                and not _not_run(_argv(p.values[0]))]
    scratch = _scratch(tmp_path)
    for command in sorted(dict.fromkeys(commands), key=lambda c: _argv(c)[0] != "run"):
        out = _run_documented(_argv(command), scratch, small)
        assert out.returncode == 0, f"{command}: exit {out.returncode}\n{out.stderr[-2000:]}"
        assert "Traceback" not in out.stderr, command

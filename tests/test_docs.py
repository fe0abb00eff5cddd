"""The documents against the tree (issue 30 item 4): every ``raylc/``, ``tests/``, ``jobs/`` and
``cluster/`` path written in backticks in README.md, ARCHITECTURE.md, CONTRIBUTING.md and
docs/ (the generated reference included) exists; ARCHITECTURE.md names every module of the
package; README.md stays within 400 lines with a table of contents whose anchors are its
headings; every relative link points to a file that exists (and to a heading of it, when it
names one). No Ray, no model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", *sorted(
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

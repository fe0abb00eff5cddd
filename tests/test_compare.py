"""`raylc compare` and `raylc longscore` on run folders (issue 18): finished runs found by
folder or glob, every table labelled by run id and model, numbers equal to `raylc longscore`
and `raylc fit` on the same tables; Wilson intervals against their definition; the comparison's
page (issue 31) in headless Chromium."""

import io
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from rich.console import Console
from typer.testing import CliRunner

from raylc.cli import app
from raylc.compare import RunRef, agreement_note, compare_page, find_runs
from raylc.dolce.categories import wilson
from raylc.dolce.sensitivity import COMPARE_SCHEMA
from raylc.io.store import Store, StoreError
from raylc.run.folder import RunFolder
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[1]
RUNNER = CliRunner()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 400), st.integers(1, 400))
def test_wilson_interval_is_the_score_test_inversion(n, total):
    """Wilson's interval is the set of p whose score test |p_hat - p| / sqrt(p(1-p)/N) <= z
    accepts: its ends solve the quadratic, so the statistic equals z there."""
    n = min(n, total)
    lo, hi = wilson(pl.lit(float(n)), pl.lit(float(total)))
    lo, hi = pl.select(lo.alias("lo"), hi.alias("hi")).row(0)
    p_hat, z = n / total, 1.959963984540054
    assert 0.0 <= lo <= p_hat <= hi <= 1.0
    for end in (lo, hi):
        if 0.0 < end < 1.0:
            assert abs(abs(p_hat - end) / math.sqrt(end * (1 - end) / total) - z) < 1e-6
    if n == 0:
        assert lo == 0.0
    if n == total:
        assert hi == pytest.approx(1.0)



def _chromium() -> str:
    """Debian's headless Chromium; skipped without it, unless CI requires it (RAYLC_REQUIRE_CHROMIUM=1, .ci/run)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("RAYLC_REQUIRE_CHROMIUM") == "1":
            pytest.fail("RAYLC_REQUIRE_CHROMIUM=1 but headless Chromium is not installed (apt-get install chromium)")
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    return chromium

def _fake_run(store: Path, run_id: str, job_file: str = "quickstart.yaml", finished: bool = True) -> Path:
    job = load_job(ROOT / "jobs" / job_file)
    stages = {"build": {"status": "done"}, "infer": {"status": "done" if finished else "running"}}
    manifest = {"run_id": run_id, "job": job.resolved(), "stages": stages, **({"finished_at": "t"} if finished else {})}
    (store / run_id).mkdir(parents=True)
    (store / run_id / "manifest.json").write_text(json.dumps(manifest))
    return store / run_id


def test_find_runs_by_folder_and_glob(tmp_path):
    for rid in ("q-1", "q-2", "h-1"):
        _fake_run(tmp_path, rid)
    _fake_run(tmp_path, "q-3", finished=False)
    (tmp_path / "q-junk").mkdir()
    assert [r.run_id for r in find_runs([f"{tmp_path}/q-*"])] == ["q-1", "q-2"]  # unfinished and non-runs skipped
    assert [r.run_id for r in find_runs([f"{tmp_path}/h-1", f"{tmp_path}/q-1", f"{tmp_path}/*-1"])] == ["h-1", "q-1"]
    with pytest.raises(StoreError, match=r"q-3: not finished \(stage infer; see `raylc status"):
        find_runs([f"{tmp_path}/q-3"])
    with pytest.raises(StoreError, match=r"nope: not a raylc run \(no manifest.json\)"):
        find_runs([f"{tmp_path}/nope"])
    with pytest.raises(StoreError, match=r"z-\*: matches no finished raylc run"):
        find_runs([f"{tmp_path}/z-*"])
    # a wildcard above the last segment (the last segment a plain name: it was taken literally)
    above = f"{tmp_path.parent}/{tmp_path.name[:-1]}"
    assert [r.run_id for r in find_runs([f"{above}*/q-1", f"{above}?/h-1"])] == ["q-1", "h-1"]
    out = RUNNER.invoke(app, ["compare", f"{tmp_path}/q-3", "--out", str(tmp_path / "out")])
    assert out.exit_code == 2 and out.output.startswith("error: ") and len(out.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def _shares(empty: pl.DataFrame, categories: list) -> pl.DataFrame:
    """Rows of a category table, one per category given, of one task subset."""
    fill = {pl.String: "x", pl.Int64: 1, pl.Float64: 0.5}
    return pl.DataFrame([{c: fill.get(t) for c, t in empty.schema.items()} | {"category": c} for c in categories],
                        schema=empty.schema)


@pytest.mark.parametrize("command", ["report", "compare"])
@pytest.mark.parametrize("edit, message", [
    pytest.param(lambda t: t.drop("task"), "column 'task' is missing", id="dropped"),
    pytest.param(lambda t: t.with_columns(pl.col("share").cast(pl.String)),
                 "column 'share' is String, declared Float64", id="retyped"),
    pytest.param(lambda t: _shares(t, ["III", "ZZ"]), "row 2: category 'ZZ' is not one of I, II, III, IV, V",
                 id="not-a-category"),
    pytest.param(lambda t: _shares(t, ["II", "III", "II"]), "row 3: category 'II' of its task subset a second time",
                 id="twice"),
    pytest.param(lambda t: _shares(t, ["II", "III", "III", "II"]),
                 "row 3: category 'III' of its task subset a second time", id="two-twice"),
])
def test_a_stored_table_that_raylc_did_not_write_is_one_line(tmp_path, command, edit, message):
    """A report table edited by hand (a column dropped, or of another type, a category that is
    not I-V or one twice) is one line naming the file and the column or row, exit 2, and compare
    writes nothing; a column added is kept."""
    from raylc.dolce.tables import CATEGORIES_TABLE

    run = _fake_run(tmp_path, "q-1")
    (run / "report").mkdir()
    edit(pl.DataFrame(schema=CATEGORIES_TABLE.dtypes).with_columns(pl.lit(1).alias("mine"))).write_parquet(
        run / "report" / "categories.parquet")
    out = RUNNER.invoke(app, [command, str(run), *(["--out", str(tmp_path / "out")] if command == "compare" else [])])
    assert out.exit_code == 2, out.output
    assert out.output.strip().splitlines() == [
        f"error: {run}/report/categories.parquet: {message}; it is not the table raylc wrote (edited, or written by "
        "another program?)"]
    assert not (tmp_path / "out").exists()


def test_a_runs_own_score_table_is_pointed_at_its_run_folder(tmp_path):
    pl.DataFrame({"task": ["t"], "length": [2048], "score": [1.0]}).write_parquet(tmp_path / "scores.parquet")
    out = RUNNER.invoke(app, ["longscore", str(tmp_path / "scores.parquet"), "--out", str(tmp_path / "o")])
    assert (out.exit_code == 2 and "missing columns ['model']" in out.output
            and "pass the run folder instead" in out.output)


@pytest.fixture(scope="module")
def four_runs(ray_session, tmp_path_factory):
    """Two quickstart runs with different seeds (and a third on the first's problems with
    another simulated accuracy), two helmet-recall runs with different simulated accuracies,
    small, in one store."""
    from raylc.evaluate import evaluate

    store = tmp_path_factory.mktemp("store")
    # point fits: compare's posterior shares and intervals are checked on the quickstart in the fast
    # tier (tests/dolce/test_shares.py); a posterior fit costs ~6 s of CPU here, the point fit ~0.1 s
    quick = {"suite.problems_per_task": 15, "suite.max_units": 150, "store.path": str(store),
             "fit.uncertainty": "none"}
    for rid, seed, acc in (("qs-a", 0, 0.9),
                           ("qs-b", 1, 0.9), ("qs-c", 0, 0.8)):  # qs-c: qs-a's problems, another probe
        evaluate(load_job(ROOT / "jobs" / "quickstart.yaml", {**quick, "seed": seed, "probe.accuracy": acc}), rid,
                 log=lambda m: None)
    helmet = {"suite.lengths": [2048, 4096, 8192, 16384], "suite.base_lengths": [2048, 4096],
              "suite.samples_per_length": 6, "store.path": str(store)}
    for rid, acc in (("hr-good", 0.95), ("hr-weak", 0.6)):
        evaluate(load_job(ROOT / "jobs" / "helmet-recall.yaml", {**helmet, "probe.accuracy": acc}),
                 rid, log=lambda m: None)
    return store


@pytest.mark.ray
def test_compare_makes_a_leaderboard_equal_to_longscore_and_fit(four_runs, tmp_path):
    store = four_runs
    out = RUNNER.invoke(app, ["compare", f"{store}/qs-*", f"{store}/hr-*", "--out", str(tmp_path / "cmp"),
                              "--n-boot", "50"])
    assert out.exit_code == 0, out.output
    cmp = tmp_path / "cmp"
    runs = pl.read_parquet(cmp / "runs.parquet")
    assert runs.select("run_id", "model").rows() == [("qs-a", "simulated"), ("qs-b", "simulated"),
                                                     ("qs-c", "simulated"),
                                                    ("hr-good", "simulated"), ("hr-weak", "simulated")]
    summary = pl.read_parquet(cmp / "summary.parquet")
    per_length = pl.read_parquet(cmp / "per_length.parquet")
    categories = pl.read_parquet(cmp / "categories.parquet")
    for table in (summary, per_length, categories):
        assert table.columns[:2] == ["run_id", "model"] and table["run_id"].null_count() == 0
        assert (table["model"] == "simulated").all()
    assert set(summary["run_id"]) == {"hr-good", "hr-weak"} and set(categories["run_id"]) == {"qs-a", "qs-b", "qs-c"}
    # one model, two runs: two rows per task, ranked; the stronger probe ranks first on score
    overall = summary.filter(pl.col("task") == "overall").sort("run_id")
    assert overall["rank_score"].to_list() == [1, 2]
    # the same numbers as `raylc longscore` on the same runs
    lc = RUNNER.invoke(app, ["longscore", f"{store}/hr-good", f"{store}/hr-weak", "--out", str(tmp_path / "lc"),
                             "--n-boot", "50"])
    assert lc.exit_code == 0, lc.output
    assert_frame_equal(pl.read_parquet(tmp_path / "lc" / "summary.parquet"), summary)
    assert "hr-good" in lc.output and "hr-weak" in lc.output
    # the category shares equal `raylc fit` on qs-a's observations, and each run's own fit (the
    # same fit through Ray: tests/dolce/test_commands.py)
    fit = RUNNER.invoke(app, ["fit", str(store / "qs-a" / "score" / "observations.parquet"), "--out",
                              str(tmp_path / "fit-qs-a"), "--no-ray", "--uncertainty", "none"])
    assert fit.exit_code == 0, fit.output
    own = {rid: pl.read_parquet(store / rid / "fits" / "tasks.parquet") for rid in ("qs-a", "qs-b", "qs-c")}
    assert pl.read_parquet(tmp_path / "fit-qs-a" / "tasks.parquet").equals(own["qs-a"])
    for rid, tasks in own.items():
        mine = categories.filter(pl.col("run_id") == rid)
        for row in tasks.iter_rows(named=True):
            for c in ("I", "II", "III", "IV", "V"):
                got = mine.filter((pl.col("task") == row["task"]) & (pl.col("subset") == row["subset"])
                                  & (pl.col("category") == c))
                assert got["share"][0] == pytest.approx(row[f"share_{c}"], abs=1e-12)
                assert got["share_lo"][0] <= got["share"][0] <= got["share_hi"][0]
    agreement = pl.read_parquet(cmp / "agreement.parquet")
    # only runs over the same problems are matched: qs-b (another seed) draws other problems
    assert agreement.select("run_a", "run_b").unique().rows() == [("qs-a", "qs-c")]
    assert agreement["rho_lam"].is_between(-1, 1).all() and (agreement["n_problems"] == 15).all()
    assert {p.name for p in cmp.glob("*.png")} >= {"categories.png", "score_vs_length.png", "longscore_vs_length.png"}
    for line in ("LongScore per run", "DOLCE category shares per run", "Categories (DOLCE Figure 1"):
        assert line in out.output


@pytest.mark.ray
def test_status_and_runs_on_finished_runs(four_runs):
    out = RUNNER.invoke(app, ["runs", str(four_runs)])
    assert out.exit_code == 0 and all(r in out.output for r in ("qs-a", "qs-b", "qs-c", "hr-good", "hr-weak"))
    assert out.output.count(" done ") >= 5
    st_out = RUNNER.invoke(app, ["status", str(four_runs / "hr-weak")])
    assert (st_out.exit_code == 0 and st_out.output.startswith("run hr-weak (")
            and ": done;" in st_out.output.splitlines()[0])
    assert np.all([s in st_out.output for s in ("build", "infer", "score", "report")])


ARTIFACTS = ROOT / "test-artifacts"  # screenshots kept for a person to look at (not in git)


@pytest.mark.ray
@pytest.mark.parametrize("run_id, headline", [("qs-a", "Focus categories per task"), ("hr-good", "LongScore (LC in %")])
def test_report_page_is_self_contained_and_leads_with_the_headline(four_runs, run_id, headline):
    """Issue 18 item 5: report/index.html, figures embedded, no script or external resource, the
    headline before the details and what the run did; rendered in headless Chromium when
    installed (Debian's package), with no console error, a screenshot kept under test-artifacts/."""
    import re
    import subprocess

    page = (four_runs / run_id / "report" / "index.html").read_text(encoding="utf-8")
    assert "<script" not in page and not re.search(r'(src|href)="(?!data:image/png;base64,)', page)
    assert page.count("data:image/png;base64,") >= 2
    assert page.index(headline) < page.index("What the run did")
    assert page.index("<h2>") == page.index(f"<h2>{headline}")  # the first section is the headline
    chromium = _chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"report-{run_id}.png"
    shot.unlink(missing_ok=True)
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--window-size=1280,2400", "--enable-logging=stderr", "--v=0", f"--screenshot={shot}",
                           (four_runs / run_id / "report" / "index.html").as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "net::ERR" in line
               or "Not allowed to load" in line]
    assert not console, console
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one


def _length_run(store: Path, run_id: str, seed: int, tasks=("json_kv", "mv_needle"), base=(200,),
                suite: dict | None = None) -> Path:
    """A finished helmet-recall run (or one of ``suite``) made without Ray: completions right for
    about three samples in four at the short lengths and one in two at the longest, its report
    written by the run's own report function."""
    from raylc.io.parallel import in_process
    from raylc.run.folder import RunFolder
    from raylc.run.manifest import Manifest
    from raylc.run.runner import Run
    from raylc.spec import parse_job
    from raylc.sweep import stages
    from raylc.sweep.report import write_length_report

    job = parse_job({"name": "lc", "seed": seed, "store": {"path": str(store)}, "suite": suite or {
        "kind": "helmet_recall", "tasks": list(tasks), "lengths": [200, 700, 1200],
        "base_lengths": list(base), "samples_per_length": 16, "depths": 2}})
    samples = stages.build_samples(job)
    draw = pl.col("sample_id").hash(seed) % 4
    wrong = (draw == 0) | ((pl.col("length") == 1200) & (draw == 1))
    first = samples.select("task", "sample_id", "length", completion=pl.when(wrong).then(pl.lit("no idea"))
                           .otherwise(pl.col("gold"))).with_columns(
        error=pl.lit(None, pl.String), truncated_tokens=pl.lit(0))
    scores = job.suite.kept(stages.with_visibility(stages.score_samples(
        stages.final_completions(samples, first, first.clear()))))
    manifest = Manifest(run_id=run_id, job=job.resolved(), seed=seed, stages={"report": {"status": "done"}},
                        finished_at="t")
    run = Run(RunFolder(str(store), run_id), job, manifest)
    run.mapper = lambda: in_process
    run.folder.write(scores, "score/scores.parquet")
    write_length_report(run, job, scores)
    run.save()
    return store / run_id


def test_one_longscore_bootstrap_per_run(tmp_path):
    """Issue 29 acceptance 4: a length run's LongScore intervals are equal in its report, `raylc
    report`, `raylc compare` of the run alone and `raylc longscore` on the run, and every table
    and printout names n_boot and the seed."""
    from cli_runner import raylc

    run = _length_run(tmp_path / "runs", "lc-1", seed=3)
    stored = pl.read_parquet(run / "report" / "summary.parquet")
    stored_per = pl.read_parquet(run / "report" / "per_length.parquet")
    assert stored["avg_lc_lo"].null_count() == 0 and (stored["avg_lc_lo"] < stored["avg_lc_hi"]).all()
    assert set(stored["n_boot"]) == {200} and set(stored["boot_seed"]) == {3}
    assert "n_boot = 200, seed = 3" in (run / "report" / "summary.md").read_text()
    assert "n_boot = 200, seed = 3" in (run / "report" / "index.html").read_text()
    report = raylc("report", str(run))
    assert report.returncode == 0 and "n_boot = 200, seed = 3" in report.stdout
    cols = ["task", "avg_lc", "avg_lc_lo", "avg_lc_hi", "n_boot", "boot_seed"]
    per_cols = ["task", "length", "lc", "lc_lo", "lc_hi", "n_boot", "boot_seed"]
    for command in (["compare", str(run)], ["longscore", str(run)]):
        done = raylc(*command, "--out", str(tmp_path / command[0]))
        assert done.returncode == 0, done.stderr
        assert "n_boot = 200, seed = 3" in done.stdout
        for name, keep in (("summary", cols), ("per_length", per_cols)):
            got = pl.read_parquet(tmp_path / command[0] / f"{name}.parquet")
            assert_frame_equal(got.select(keep), (stored if name == "summary" else stored_per).select(keep))
    # another bootstrap when asked for, and named so
    other = raylc("longscore", str(run), "--out", str(tmp_path / "other"), "--n-boot", "50", "--seed", "1")
    assert other.returncode == 0 and "n_boot = 50, seed = 1" in other.stdout


def test_compare_takes_runs_with_other_base_lengths_when_no_task_is_in_both(tmp_path):
    """Issue 31 (found trying it): `raylc compare` of length runs whose suites set different
    LongScore base lengths gives each run its own LongScore (equal to its report); only runs that
    share a task under different base lengths are refused, with one line naming the task."""
    from cli_runner import raylc

    a = _length_run(tmp_path / "runs", "lc-a", seed=1, tasks=("json_kv",), base=(200,))
    b = _length_run(tmp_path / "runs", "lc-b", seed=2, tasks=("mv_needle",), base=(200, 700))
    done = raylc("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stderr
    got = pl.read_parquet(tmp_path / "cmp" / "summary.parquet")
    keep = ["task", "base", "avg_lc", "avg_lc_lo", "avg_lc_hi", "n_boot", "boot_seed"]
    for run in (a, b):
        stored = pl.read_parquet(run / "report" / "summary.parquet")
        mine = got.filter(pl.col("run_id") == run.name).filter(pl.col("task") != "overall")
        assert_frame_equal(mine.select(keep), stored.filter(pl.col("task") != "overall").select(keep))
    c = _length_run(tmp_path / "runs", "lc-c", seed=3, tasks=("json_kv",), base=(200, 700))
    clash = raylc("compare", str(a), str(c), "--out", str(tmp_path / "clash"))
    assert clash.returncode == 2 and not (tmp_path / "clash").exists()
    assert clash.stderr.strip().count("\n") == 0 and "json_kv" in clash.stderr and "base lengths" in clash.stderr


def test_a_run_with_no_length_above_its_base_lengths_reports_no_longscore(tmp_path):
    """Lengths 200, 700, 1200 with base 700, 1200: no long length (200 is shorter than the base),
    so the report has its per-length scores and no LongScore tables."""
    from cli_runner import raylc

    run = _length_run(tmp_path / "runs", "lc-short", seed=1, base=(700, 1200))
    assert (run / "report" / "per_task_length.parquet").exists()
    assert not (run / "report" / "summary.parquet").exists() and not (run / "report" / "per_length.parquet").exists()
    assert "## LongScore" not in (run / "report" / "summary.md").read_text()
    # compare and longscore apply the report's rule: such a run is listed without LongScore
    other = _length_run(tmp_path / "runs", "lc-a", seed=2, tasks=("mv_needle",))
    done = raylc("compare", str(run), str(other), "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stderr
    assert set(pl.read_parquet(tmp_path / "cmp" / "summary.parquet")["run_id"]) == {"lc-a"}
    alone = raylc("longscore", str(run), "--out", str(tmp_path / "ls"))
    assert alone.returncode == 2 and "no run among them has a LongScore" in alone.stderr, alone.stderr


def test_a_run_without_longscore_base_lengths_is_compared_without_longscore(tmp_path):
    """A LongBench v2 run (no base lengths: its report has no LongScore) beside a helmet run:
    `raylc compare` gives the helmet run its LongScore and lists both (it exited 2, raising on the
    v2 run's missing base); `raylc longscore` of the v2 run alone says why there is none."""
    from cli_runner import raylc

    a = _length_run(tmp_path / "runs", "lc-a", seed=1)
    v2 = _length_run(tmp_path / "runs", "v2", seed=1, suite={
        "kind": "longbench_v2", "data": str(Path(__file__).resolve().parents[1] / "jobs" / "data" / "longbench_v2"
                                           / "fixture.json")})
    assert not (v2 / "report" / "summary.parquet").exists()
    done = raylc("compare", str(a), str(v2), "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stderr
    assert set(pl.read_parquet(tmp_path / "cmp" / "runs.parquet")["run_id"]) == {"lc-a", "v2"}
    got = pl.read_parquet(tmp_path / "cmp" / "summary.parquet")
    assert set(got["run_id"]) == {"lc-a"}
    keep = ["task", "base", "avg_lc", "avg_lc_lo", "avg_lc_hi"]
    assert_frame_equal(got.select(keep), pl.read_parquet(a / "report" / "summary.parquet").select(keep))
    alone = raylc("longscore", str(v2), "--out", str(tmp_path / "ls"))
    assert alone.returncode == 2 and "no run among them has a LongScore" in alone.stderr, alone.stderr
    assert not (tmp_path / "ls").exists()


@pytest.mark.ray
@pytest.mark.parametrize("run_id", ["qs-a", "hr-good"])
def test_report_prints_the_pages_sections_in_the_pages_order(four_runs, run_id):
    """Issue 31 item 6: `raylc report` walks the sections of report/index.html in its order
    (the EM section and "What the run did" included), and the page it rebuilds is the run's page."""
    import html
    import re

    from cli_runner import raylc

    page = (four_runs / run_id / "report" / "index.html").read_text(encoding="utf-8")
    headings = [html.unescape(h) for h in re.findall(r"<h2>(.*?)</h2>", page)]
    assert headings[-1] == "What the run did" and len(headings) >= 4
    if run_id == "qs-a":
        assert any(h.startswith("EM per task subset") for h in headings)
    out = raylc("report", four_runs / run_id)
    assert out.returncode == 0, out.stderr
    where = [0]
    for heading in headings:  # each after the one before it
        where.append(out.stdout.find(heading, where[-1] + 1 if len(where) > 1 else 0))
        assert where[-1] != -1, (heading, headings)


@pytest.mark.ray
def test_compare_writes_its_page_and_80_columns_keep_ids_and_task_names_whole(four_runs, tmp_path):
    """Issue 31 items 2-3: `raylc compare` writes index.html beside its tables (headline tables,
    then figures; an empty agreement table says why), and at COLUMNS=80 on a terminal `runs`,
    `status`, `report` and `compare` print run ids and task names whole on a line."""
    import re

    from cli_runner import raylc

    tty = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}
    out = raylc("compare", f"{four_runs}/qs-a", f"{four_runs}/qs-b", f"{four_runs}/hr-*", "--out", tmp_path / "cmp",
                env=tty)
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "cmp" / "index.html").read_text(encoding="utf-8")
    assert page.index("<table>") < page.index("<img") and page.count("data:image/png;base64,") == 3
    assert "agreement.parquet has 0 rows: no two of the 2 DOLCE runs share a problem" in page
    assert "agreement.parquet has 0 rows" in out.stdout
    tasks = ["planted-a", "planted-b", "json_kv", "mk_needle_number", "mk_needle_uuid", "mv_needle"]
    checks = {"compare": (out.stdout, ["qs-a", "qs-b", "hr-good", "hr-weak", *tasks]),
              "runs": (raylc("runs", four_runs, env=tty).stdout, ["qs-a", "qs-b", "qs-c", "hr-good", "hr-weak"]),
              "status": (raylc("status", four_runs / "hr-weak", env=tty).stdout, ["hr-weak"]),
              "report qs-a": (raylc("report", four_runs / "qs-a", env=tty).stdout, ["qs-a", "planted-a", "planted-b"]),
              "report hr-good": (raylc("report", four_runs / "hr-good", env=tty).stdout, ["hr-good", *tasks[2:]])}
    for command, (text, names) in checks.items():
        text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # bold and italic titles
        lines = text.splitlines()
        assert lines and max(map(len, lines)) <= 80 and "…" not in text, command
        for name in names:
            assert any(name in line for line in lines), (command, name)


# The page of `raylc compare` (raylc.compare.compare_page): headline tables first, then the
# figures, the terminal printing the same sections in the same order, an empty agreement table
# that says why; rendered in headless Chromium (skipped without it), the screenshot kept under
# test-artifacts/ for a person to look at.

LONG_ID = "helmet-recall-20261126-120000-very-long-run-id-a"


def _runs(tmp_path: Path, problems: dict[str, list[str]]) -> list[RunRef]:
    """DOLCE run references whose build/problems.parquet hold the given questions (one task)."""
    job = load_job(ROOT / "jobs" / "quickstart.yaml")
    out = []
    for run_id, questions in problems.items():
        folder = RunFolder(str(tmp_path), run_id)
        folder.write(pl.DataFrame({"task": ["planted-a"] * len(questions),
                                   "problem_id": [f"p{i}" for i in range(len(questions))],
                                   "question": questions, "units": [["u"]] * len(questions)}),
                     "build/problems.parquet")
        out.append(RunRef(folder, job))
    return out


def _tables(runs: list[RunRef]) -> dict[str, pl.DataFrame]:
    ids = [r.run_id for r in runs]
    categories = pl.DataFrame({
        "run_id": [i for i in ids for _ in range(5)], "model": ["simulated"] * 5 * len(ids),
        "task": ["planted-a-with-a-long-task-name"] * 5 * len(ids), "subset": ["planted-a-with-a-long-task-name"] * 5
        * len(ids), "scenario": ["COW"] * 5 * len(ids), "category": ["I", "II", "III", "IV", "V"] * len(ids),
        "n": [0, 10, 20, 60, 10] * len(ids), "n_problems": [100] * 5 * len(ids),
        "share": [0.0, 0.1, 0.2, 0.6, 0.1] * len(ids), "share_lo": [0.0, 0.05, 0.12, 0.5, 0.05] * len(ids),
        "share_hi": [0.03, 0.17, 0.29, 0.69, 0.17] * len(ids), "interval": ["95% posterior interval"] * 5 * len(ids)})
    runs_table = pl.DataFrame({"run_id": ids, "model": ["simulated"] * len(ids), "uri": [r.uri for r in runs],
                               "job": ["quickstart"] * len(ids), "suite": ["planted"] * len(ids),
                               "seed": list(range(len(ids)))})
    return {"runs": runs_table, "categories": categories, "agreement": pl.DataFrame(schema={
        "run_a": pl.String, "model_a": pl.String, "run_b": pl.String, "model_b": pl.String, **COMPARE_SCHEMA})}


def test_an_empty_agreement_table_says_why(tmp_path):
    one = _runs(tmp_path / "one", {"qs-a": ["q1"]})
    assert "1 DOLCE run was given" in agreement_note(one, _tables(one)["agreement"])
    other = _runs(tmp_path / "two", {"qs-a": ["q1", "q2"], "qs-b": ["q3", "q4"]})
    note = agreement_note(other, _tables(other)["agreement"])
    assert note.startswith("agreement.parquet has 0 rows: no two of the 2 DOLCE runs share a problem")
    same = _runs(tmp_path / "three", {"qs-a": ["q1"], "qs-c": ["q1"]})
    assert "share problems, but no task subset" in agreement_note(same, _tables(same)["agreement"])
    page = compare_page(other, _tables(other), {})
    assert "no two of the 2 DOLCE runs share a problem" in page.render()
    printed = io.StringIO()
    page.print(Console(file=printed, width=200))
    assert "no two of the 2 DOLCE runs share a problem" in printed.getvalue()


def test_the_terminal_prints_the_pages_sections_in_the_pages_order(tmp_path):
    runs = _runs(tmp_path, {LONG_ID: ["q1"], "qs-b": ["q2"]})
    page = compare_page(runs, _tables(runs), {"categories.png": b"\x89PNG"})
    html = page.render()
    headings = re.findall(r"<h2>(.*?)</h2>", html)
    assert headings == page.headings() and headings[0] == "2 runs" and headings[-1].startswith("DOLCE category")
    printed = io.StringIO()
    page.print(Console(file=printed, width=400))
    text = printed.getvalue()
    where = [text.find(h.replace("&#x27;", "'")) for h in headings]
    assert -1 not in where and where == sorted(where), (headings, where)


def test_compare_page_renders_in_headless_chromium(tmp_path):
    """index.html beside the tables: the tables first, then the figures (drawn by the same plot
    functions as `raylc compare`), rendered by Chromium with no console error; the DOM holds
    the tables and the screenshot is a rendered page."""
    from raylc.dolce.plots import plot_category_shares_by_run

    runs = _runs(tmp_path / "store", {LONG_ID: ["q1"], "qs-b": ["q2"]})
    tables = _tables(runs)
    out = tmp_path / "cmp"
    plot_category_shares_by_run(tables["categories"], out / "categories.png")
    page = compare_page(runs, tables, {"categories.png": (out / "categories.png").read_bytes()})
    Store(str(out)).write_outputs({}, {"index.html": page.render()})
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "<script" not in page and not re.search(r'(src|href)="(?!data:image/png;base64,)', page)
    assert page.index("<table>") < page.index("<img")  # the tables before the figures
    chromium = _chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "compare-page.png"
    shot.unlink(missing_ok=True)
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'chromium'}", "--enable-logging=stderr", "--v=0"]
    uri = (out / "index.html").as_uri()
    dom = subprocess.run([*flags, "--dump-dom", uri], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<table>") == 2 and LONG_ID in dom.stdout and "60.0% [50.0, 69.0]" in dom.stdout
    assert "Agreement between runs" in dom.stdout and "share a problem" in dom.stdout  # runs and shares; no agreement
    proc = subprocess.run([*flags, "--window-size=1280,2000", f"--screenshot={shot}", uri], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "net::ERR" in line
               or "Not allowed to load" in line]
    assert not console, console
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one

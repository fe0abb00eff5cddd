"""`raylc compare` and `raylc longscore` on run folders (issue 18): finished runs found by
folder or glob, every table labelled by run id and model, numbers equal to `raylc longscore`
and `raylc fit` on the same tables; Wilson intervals against their definition."""

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from raylc.cli import app
from raylc.compare import find_runs
from raylc.dolce.categories import wilson
from raylc.io.store import StoreError
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
    out = RUNNER.invoke(app, ["compare", f"{tmp_path}/q-3", "--out", str(tmp_path / "out")])
    assert out.exit_code == 2 and out.output.startswith("error: ") and len(out.output.strip().splitlines()) == 1
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
    quick = {"suite.problems_per_task": 30, "suite.max_units": 150, "store.path": str(store)}
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
    # the category shares equal `raylc fit` on the run's observations
    for rid in ("qs-a", "qs-b", "qs-c"):
        fit = RUNNER.invoke(app, ["fit", str(store / rid / "score" / "observations.parquet"), "--out",
                                  str(tmp_path / f"fit-{rid}"), "--no-ray"])
        assert fit.exit_code == 0, fit.output
        tasks = pl.read_parquet(tmp_path / f"fit-{rid}" / "tasks.parquet")
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
    assert agreement["rho_lam"].is_between(-1, 1).all() and (agreement["n_problems"] == 30).all()
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
    import shutil
    import subprocess

    page = (four_runs / run_id / "report" / "index.html").read_text(encoding="utf-8")
    assert "<script" not in page and not re.search(r'(src|href)="(?!data:image/png;base64,)', page)
    assert page.count("data:image/png;base64,") >= 2
    assert page.index(headline) < page.index("What the run did")
    assert page.index("<h2>") == page.index(f"<h2>{headline}")  # the first section is the headline
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
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

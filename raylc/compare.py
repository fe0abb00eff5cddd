"""Finished runs side by side (``raylc compare``): the runs named, their tables, the comparison and its page.

A run is its folder ``<store>/<run_id>`` (local or s3://), named directly or by a glob on its last
segment (``runs/helmet-*``, ``s3://bucket/runs/q*``). From the length-controlled runs come
their kept scores, relabelled so that LongScore (:func:`raylc.sweep.longscore.longscore`) ranks
runs, not only models: two runs of one model stay two rows. From the DOLCE runs come the
category shares per task with their 95% intervals as each run stored them, and, for every pair of
DOLCE runs over the same problems, the agreement of Section 6 (Spearman's rho of lambda and k,
:func:`raylc.dolce.sensitivity.compare_fits`). Every table starts with ``run_id`` and ``model`` (the
probe's model; ``simulated`` for the simulated probe), the agreement of a pair with ``run_a, model_a,
run_b, model_b``.
"""

from __future__ import annotations

import fnmatch
import glob
import itertools
import os
from dataclasses import dataclass
from typing import Optional, Sequence

import polars as pl

from raylc.dolce.categories import CATEGORIES
from raylc.dolce.tables import CATEGORIES_TABLE, FIT_PROBLEMS, FIT_TASKS, PROBLEMS
from raylc.io.figures import png_bytes
from raylc.io.page import Page, image_html, table_html, text_html
from raylc.io.parallel import Mapper
from raylc.io.schemas import TableSchema, check_tables, declare
from raylc.io.store import Store, StoreError
from raylc.run.folder import MANIFEST, RunFolder, run_folders
from raylc.run.manifest import Manifest
from raylc.spec import Job, JobSpecError, parse_job
from raylc.sweep.longscore import longscore_applies, rank_tables
from raylc.sweep.report import LONGSCORE_FIGURES, longscore_figures
from raylc.sweep.tables import PER_LENGTH, SCORES, SUMMARY


@dataclass(frozen=True)
class RunRef:
    """A finished run: its folder and job."""

    folder: RunFolder
    job: Job

    @property
    def run_id(self) -> str:
        return self.folder.run_id

    @property
    def uri(self) -> str:
        return self.folder.uri()

    @property
    def model(self) -> str:
        return self.job.model_name()

    def read(self, schema: TableSchema, stage: str, columns: Optional[list[str]] = None) -> pl.DataFrame:
        """The run's table ``schema`` (its ``columns``), written by its ``stage``, checked
        (:meth:`raylc.run.folder.RunFolder.read_declared`)."""
        return self.folder.read_declared(schema, columns, stage)


def _candidates(pattern: str) -> list[RunFolder]:
    """The run folders a pattern names: itself, or the folders its last segment matches."""
    root, _, last = pattern.rstrip("/").rpartition("/")
    if any(c in root for c in "*?[") and "://" not in root:  # a local glob with wildcards higher up
        matched = sorted(glob.glob(pattern.rstrip("/")))
        return [RunFolder.at(path) for path in matched or ([pattern] if os.path.isdir(pattern) else [])]
    if not any(c in last for c in "*?["):
        return [RunFolder.at(pattern)]
    return [folder for folder in run_folders(root or ".") if fnmatch.fnmatchcase(folder.run_id, last)]


def find_runs(patterns: Sequence[str]) -> list[RunRef]:
    """The finished runs the patterns name, in order, each once (a local one by its real path). A
    run named directly that is missing or unfinished is a :class:`StoreError` (one line); a glob
    skips folders that are not finished runs, and matching none is an error."""
    runs: list[RunRef] = []
    seen: set[str] = set()
    for pattern in patterns:
        found = _candidates(pattern)
        direct = len(found) == 1 and not any(c in pattern for c in "*?[")
        kept = 0
        for folder in found:
            ref = _finished_run(folder, strict=direct)
            if ref is None:
                continue
            kept += 1
            key = ref.uri if "://" in ref.uri else os.path.realpath(ref.uri)  # a link or a ../ names one run once
            if key not in seen:
                seen.add(key)
                runs.append(ref)
        if not direct and not kept:
            raise StoreError(f"{pattern}: matches no finished raylc run")
    return runs


def run_job_of(folder: RunFolder, manifest: Manifest) -> Job:
    """The job a run's manifest records (a :class:`StoreError` naming the manifest when it is no job)."""
    try:
        return parse_job(manifest.job, folder.uri(MANIFEST))
    except JobSpecError as exc:
        raise StoreError(str(exc)) from None


def _finished_run(folder: RunFolder, strict: bool) -> Optional[RunRef]:
    manifest = folder.manifest()
    uri = folder.uri()
    problem = None
    if manifest is None:
        problem = "not a raylc run (no manifest.json)"
    else:
        job = run_job_of(folder, manifest)
        if not manifest.finished():
            problem = f"not finished (stage {manifest.first_unfinished() or 'report'}; see `raylc status {uri}`)"
    if problem is None:
        return RunRef(folder, job)
    if strict:
        raise StoreError(f"{uri}: {problem}")
    return None


def _labels(runs: Sequence[RunRef]) -> pl.DataFrame:
    """A unique label per run (its id; with its store when two stores share an id)."""
    ids = [r.run_id for r in runs]
    labels = [r.run_id if ids.count(r.run_id) == 1 else r.uri for r in runs]
    return pl.DataFrame({"label": labels, "run_id": ids, "model": [r.model for r in runs]},
                        schema={"label": pl.String, "run_id": pl.String, "model": pl.String})


def relabel(frame: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """``frame`` keyed by run label in ``model`` -> ``run_id`` and ``model`` columns first."""
    out = frame.rename({"model": "label"}).join(labels, on="label", how="left").drop("label")
    return out.select("run_id", "model", *[c for c in out.columns if c not in ("run_id", "model")])


def length_scores(runs: Sequence[RunRef]) -> tuple[pl.DataFrame, pl.DataFrame, list[int]]:
    """The kept scores of the length-controlled runs as LongScore input (``model`` = the run's
    label), the labels, and the base lengths the runs with LongScore share ([] when none has
    any; None when they differ: each run then keeps its own; a :class:`StoreError` when two runs
    with a task in common differ)."""
    from raylc.sweep.stages import scores_for_longscore

    sweep = [r for r in runs if r.job.suite.family == "sweep"]
    labels = _labels(sweep)
    frames, bases, task_bases = [], set(), {}
    for ref, label in zip(sweep, labels["label"]):
        scores = ref.read(SCORES, "score")
        frames.append(scores_for_longscore(scores.filter(pl.col("kept")), label, ref.job.suite.axis))
        base = tuple(ref.job.suite.longscore_base())
        if not longscore_applies(frames[-1], base):  # no LongScore (LongBench v1 and v2: no base lengths)
            continue
        bases.add(base)
        for task in frames[-1]["task"].unique().sort():
            task_bases.setdefault(task, {}).setdefault(base, ref.uri)
    for task, seen in task_bases.items():
        if len(seen) > 1:
            shown = "; ".join(f"{uri}: {', '.join(map(str, b))}" for b, uri in sorted(seen.items()))
            raise StoreError(f"task {task!r} has other LongScore base lengths in other runs ({shown}): "
                             "compare runs of one suite setting")
    schema = {"model": pl.String, "task": pl.String, "length": pl.Int64, "sample_id": pl.String, "score": pl.Float64}
    table = pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame(schema=schema)
    return table, labels, (list(next(iter(bases), ())) if len(bases) <= 1 else None)


def category_shares(runs: Sequence[RunRef]) -> pl.DataFrame:
    """Per DOLCE run, task, subset and category: the run's own shares, read from its
    ``report/categories.parquet`` (n, n_problems, share: the posterior-mean share, share_lo,
    share_hi: its 95% interval, interval: what that interval is over; :mod:`raylc.dolce.shares`),
    so ``raylc compare`` repeats what the run printed."""
    from raylc.dolce.shares import SHARE_SCHEMA

    schema = {"run_id": pl.String, "model": pl.String, "task": pl.String, "subset": pl.String, "scenario": pl.String,
              **SHARE_SCHEMA}
    frames = []
    for ref in runs:
        if ref.job.suite.family != "dolce":
            continue
        table = ref.read(CATEGORIES_TABLE, "report")
        if "n_problems" not in table.columns:  # written before 2026-11-27 (the declaration's optional columns)
            table = table.with_columns(n_problems=pl.col("n").sum().over("task", "subset"))
        if "interval" not in table.columns:
            table = table.with_columns(interval=pl.lit(None, pl.String))
        frames.append(table.select(pl.lit(ref.run_id).alias("run_id"), pl.lit(ref.model).alias("model"),
                                   *[pl.col(c).cast(t) for c, t in schema.items() if c not in ("run_id", "model")]))
    if not frames:
        return pl.DataFrame(schema=schema)
    order = {c: i for i, c in enumerate(CATEGORIES)}
    out = pl.concat(frames, how="vertical_relaxed")
    return out.sort("run_id", "task", "subset", pl.col("category").replace_strict(order, return_dtype=pl.Int64))


def probe_agreement(runs: Sequence[RunRef]) -> pl.DataFrame:
    """For every pair of DOLCE runs, per (task, subset) over the problems both fitted whose
    question and units are the same (different probes, or settings, on one suite): Section 6's
    metrics (Spearman's rho of lambda and k, median relative changes, category agreement,
    KL of the noise), the first run as reference."""
    from raylc.dolce.sensitivity import COMPARE_SCHEMA, compare_fits

    dolce = [r for r in runs if r.job.suite.family == "dolce"]
    fits = {r.uri: (r.read(FIT_PROBLEMS, "fit"), r.read(FIT_TASKS, "fit")) for r in dolce}
    rows = []
    for a, b, same in _shared_problems(dolce):
        keep = [fits[a.uri][0].join(same, on=["task", "problem_id"], how="semi"),
                fits[b.uri][0].join(same, on=["task", "problem_id"], how="semi")]
        table = compare_fits(keep[0], fits[a.uri][1], keep[1], fits[b.uri][1])
        if table.height:
            rows.append(table.select(pl.lit(a.run_id).alias("run_a"), pl.lit(a.model).alias("model_a"),
                                     pl.lit(b.run_id).alias("run_b"), pl.lit(b.model).alias("model_b"), pl.all()))
    schema = {"run_a": pl.String, "model_a": pl.String, "run_b": pl.String, "model_b": pl.String, **COMPARE_SCHEMA}
    return pl.concat(rows) if rows else pl.DataFrame(schema=schema)


def _shared_problems(dolce: Sequence[RunRef]) -> list[tuple[RunRef, RunRef, pl.DataFrame]]:
    """Every pair of ``dolce`` runs that share problems, with those problems (task, problem_id,
    content; :func:`_problem_content`)."""
    if len(dolce) < 2:  # no pair: no problems to read
        return []
    content = {r.uri: _problem_content(r) for r in dolce}
    pairs = ((a, b, content[a.uri].join(content[b.uri], on=["task", "problem_id", "content"], how="inner"))
             for a, b in itertools.combinations(dolce, 2))
    return [(a, b, same) for a, b, same in pairs if same.height]


def _problem_content(ref: RunRef) -> pl.DataFrame:
    """(task, problem_id, content): a hash of each problem's question and units, so that only
    the same problems are matched across runs (one id may name other problems under another
    seed or data file)."""
    problems = ref.read(PROBLEMS, "build", ["task", "problem_id", "question", "units"])
    return problems.select("task", "problem_id", content=pl.struct("question", "units").hash())


def runs_table(runs: Sequence[RunRef]) -> pl.DataFrame:
    """One row per run: run_id, model, uri, job, suite, seed."""
    return pl.DataFrame([{"run_id": r.run_id, "model": r.model, "uri": r.uri, "job": r.job.name,
                          "suite": r.job.suite.kind, "seed": r.job.seed} for r in runs],
                        schema={"run_id": pl.String, "model": pl.String, "uri": pl.String, "job": pl.String,
                                "suite": pl.String, "seed": pl.Int64})


def runs_longscore(runs: Sequence[RunRef], base_lengths: Optional[Sequence[int]] = None,
                   n_boot: Optional[int] = None, seed: Optional[int] = None,
                   mapper: Optional[Mapper] = None) -> list[dict[str, pl.DataFrame]]:
    """LongScore of each length-controlled run as its own report computed it
    (:func:`raylc.sweep.report.longscore_of_run` with the run's bootstrap,
    :func:`raylc.sweep.report.run_bootstrap`: the n_boot and seed its ``report/summary.parquet``
    states), ``model`` set to the run's label; ``n_boot`` / ``seed`` replace the run's own. A run
    without LongScore in its report (:func:`raylc.sweep.longscore.longscore_applies`: LongBench v1
    and v2 have no base lengths) has none here either."""
    from raylc.sweep.report import longscore_of_run, run_bootstrap
    from raylc.sweep.stages import scores_for_longscore

    sweep = [r for r in runs if r.job.suite.family == "sweep"]
    out = []
    for ref, label in zip(sweep, _labels(sweep)["label"]):
        kept = ref.read(SCORES, "score").filter(pl.col("kept"))
        base = ref.job.suite.longscore_base() if base_lengths is None else base_lengths
        if not longscore_applies(scores_for_longscore(kept, label, ref.job.suite.axis), base):
            continue
        stored = ref.folder.read_declared(SUMMARY, stage="report", missing_ok=True)
        own_boot, own_seed = run_bootstrap(ref.job, stored)
        try:
            result = longscore_of_run(kept, ref.job, own_boot if n_boot is None else n_boot,
                                      own_seed if seed is None else seed, mapper, base_lengths)
        except ValueError as exc:
            raise StoreError(f"{ref.uri}: LongScore: {exc}") from None
        out.append({name: frame.with_columns(model=pl.lit(label)) for name, frame in result.items()})
    return out


def merge_longscore(results: Sequence[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Several LongScore results (each with its own models and bootstrap) as one, ranked among
    all their models (:func:`raylc.sweep.longscore.rank_tables`)."""
    per_length, summary = rank_tables(pl.concat([r["per_length"] for r in results], how="vertical_relaxed"),
                                      pl.concat([r["summary"] for r in results], how="vertical_relaxed"))
    return {"per_length": per_length, "summary": summary}


def compare_tables() -> tuple[TableSchema, ...]:
    """What ``raylc compare RUNS --out DIR`` writes under DIR (a function: the DOLCE tables'
    declarations load the estimator)."""
    from raylc.dolce.tables import CATEGORIES_TABLE, COMPARE

    run = declare(("run_id", pl.String, "The run."), ("model", pl.String, "Its probe's model."))
    return (
        TableSchema("runs", "runs.parquet", "One row per run.", (*run, *declare(
            ("uri", pl.String, "Where the run is."), ("job", pl.String, "Its job's name."),
            ("suite", pl.String, "Its suite's kind."), ("seed", pl.Int64, "Its seed.")))),
        PER_LENGTH.relocated("per_length.parquet"),
        SUMMARY.relocated("summary.parquet"),
        TableSchema("categories", "categories.parquet", (
            "DOLCE runs: each run's category shares, read from its `report/categories.parquet`."), (
            *run, *CATEGORIES_TABLE.columns)),
        TableSchema("agreement", "agreement.parquet", (
            "Every pair of DOLCE runs, over the problems both fitted that are the same (Section 6's metrics)."), (
            *declare(("run_a", pl.String, "The reference run."), ("model_a", pl.String, "Its model."),
                     ("run_b", pl.String, "The other run."), ("model_b", pl.String, "Its model.")),
            *COMPARE.columns)),
    )


def compare_runs(runs: Sequence[RunRef], out_uri: str, n_boot: Optional[int] = None, seed: Optional[int] = None,
                 mapper: Optional[Mapper] = None) -> tuple[dict[str, pl.DataFrame], Page]:
    """The leaderboard of ``runs`` under ``out_uri``: ``runs``, LongScore (``per_length``,
    ``summary``: per run and task with CIs and the three rankings; each run's intervals from its
    own bootstrap, :func:`runs_longscore`, unless ``n_boot`` / ``seed`` are given) for the
    length-controlled runs, ``categories`` (each run's stored shares, :func:`category_shares`)
    and ``agreement`` for the DOLCE runs, figures, and the page ``index.html``
    (:func:`compare_page`), which is returned with the tables (``raylc compare`` prints it).
    Nothing is written when a table cannot be made."""
    tables: dict[str, pl.DataFrame] = {"runs": runs_table(runs)}
    figures: dict[str, bytes] = {}
    scores, labels, base = length_scores(runs)
    results = runs_longscore(runs, None, n_boot, seed, mapper) if scores.height and base != [] else []
    if results:
        result = merge_longscore(results)
        figures.update(longscore_figures(result))
        tables.update({name: relabel(frame, labels) for name, frame in result.items()})
    shares = category_shares(runs)
    if shares.height:
        from raylc.dolce.plots import plot_category_shares_by_run

        tables["categories"] = shares
        tables["agreement"] = probe_agreement(runs)
        figures.update(png_bytes({"categories.png": lambda path: plot_category_shares_by_run(shares, path)}))
    tables = check_tables(compare_tables(), tables)
    page = compare_page(runs, tables, figures)
    Store(out_uri).write_outputs(tables, {**figures, "index.html": page.render()}, replaces=(
        *(schema.path for schema in compare_tables()), *(name for name, _ in FIGURES), *LONGSCORE_FIGURES))
    return tables, page


# The page of a comparison: ``index.html`` beside its tables, built like a run's page
# (:class:`raylc.io.page.Page`): the headline tables first (the runs, LongScore per run, the
# category shares per run, the agreement between runs), then the figures. ``raylc compare``
# prints the same sections in the same order (:meth:`raylc.io.page.Page.print`).

#: the figures ``raylc compare`` may write, in the page's order, with their headings
FIGURES = (("categories.png", "DOLCE category shares per run, 95% intervals"),
           ("score_vs_length.png", "Score against length per run"),
           ("longscore_vs_length.png", "LongScore against length per run"))


def agreement_note(runs: Sequence[RunRef], agreement: pl.DataFrame) -> str:
    """Why ``agreement.parquet`` has the rows it has: the pairs of DOLCE runs compared, or,
    with none, why no pair could be (one DOLCE run only; no two runs over the same problems)."""
    dolce = [r for r in runs if r.job.suite.family == "dolce"]
    if agreement.height:
        pairs = agreement.select("run_a", "run_b").unique(maintain_order=True).height
        return (f"{pairs} pair(s) of DOLCE runs over the same problems (task, id, question and units equal); "
                "Spearman's rho of lambda and k over those problems (DOLCE Section 6), the first run as reference.")
    if len(dolce) < 2:
        return (f"agreement.parquet has 0 rows: it compares pairs of DOLCE runs, and {len(dolce)} DOLCE run was given.")
    shared = _shared_problems(dolce)
    if not shared:
        return (f"agreement.parquet has 0 rows: no two of the {len(dolce)} DOLCE runs share a problem (same task, "
                "id, question and units); runs with another seed or data draw other problems. Run one suite and "
                "seed with two probes (or settings) to compare them.")
    return (f"agreement.parquet has 0 rows: {len(shared)} pair(s) of runs share problems, but no task subset (COW "
            "or PIG) was fitted in both runs.")


def compare_page(runs: Sequence[RunRef], tables: dict[str, pl.DataFrame], figures: dict[str, bytes]) -> Page:
    """The page of a comparison: ``tables`` as :func:`raylc.compare.compare_runs` returns them,
    ``figures`` its PNGs by file name; headline tables first, then the figures."""
    from raylc.dolce.categories import CATEGORY_LEGEND

    models = sorted(set(tables["runs"]["model"]))
    out = Page(f"raylc compare: {len(runs)} runs",
               f"{len(runs)} finished runs of {len(models)} model(s): {', '.join(models)}")
    out.headline.append((f"{len(runs)} runs", [table_html(tables["runs"])]))
    if "summary" in tables:
        from raylc.sweep.report import bootstrap_note

        cols = [c for c in ("run_id", "model", "task", "base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi",
                            "rank_base", "rank_score", "rank_lc", "n_boot", "boot_seed", "warning")
                if c in tables["summary"].columns]
        summary = tables["summary"].select(cols).with_columns(
            pl.col("base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi").round(2))
        out.headline.append((f"LongScore per run (LC in %, averaged over long lengths; "
                             f"{bootstrap_note(tables['summary'])})",
                             [table_html(summary),
                              text_html("LC_l = 100 (S_l - Base) / Base, Base the mean score at the base lengths "
                                        "(100-LongBench Eq. 1-2); ranks among the runs of this comparison.")]))
    if "categories" in tables:
        from raylc.dolce.report import interval_note, shares_with_intervals

        out.headline.append(("DOLCE category shares per run [95% interval], as each run reported them",
                             [table_html(shares_with_intervals(tables["categories"])),
                              text_html(f"Share: {interval_note(tables['categories'])}."),
                              text_html("Categories (DOLCE Figure 1; lambda_p = k_p: the first tertile of the task's "
                                        "observation lengths; lambda_q: the problem's longest partial observation):"),
                              *[text_html(line) for line in CATEGORY_LEGEND]]))
        agreement = tables["agreement"]
        note = text_html(agreement_note(runs, agreement), "note" if agreement.height else "warn")
        frags = [note]
        if agreement.height:
            shown = agreement.select("run_a", "run_b", "task", "subset", "n_problems", "rho_lam", "rho_k",
                                     "category_agreement").with_columns(
                pl.col("rho_lam", "rho_k", "category_agreement").round(3))
            frags = [table_html(shown), note]
        out.headline.append(("Agreement between runs (Spearman, DOLCE Section 6)", frags))
    for name, heading in FIGURES:
        if name in figures:
            out.details.append((heading, [image_html(figures[name], f"{heading} ({name})")]))
    return out


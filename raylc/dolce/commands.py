"""`raylc fit` and `raylc sensitivity`: DOLCE on an observation table, outside a full run."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import polars as pl

from raylc.dolce import ObservationError, compare_fits, fit_observations, run_sensitivity
from raylc.dolce.options import FitOptions
from raylc.dolce.report import FIGURES
from raylc.dolce.report import figures as draw_figures
from raylc.dolce.tables import FIT_COMMAND_TABLES, SENSITIVITY
from raylc.io.figures import png_bytes
from raylc.io.parallel import Mapper
from raylc.io.schemas import check_tables, stored_table
from raylc.io.store import Store, StoreError, read_input


def _observations(uri: str) -> pl.DataFrame:
    obs = read_input(uri)
    try:
        from raylc.dolce import validate_observations

        return validate_observations(obs)
    except ObservationError as exc:
        raise StoreError(f"{uri}: {exc}") from None


def settings_record(obs_uri: str, options: FitOptions, **extra: Any) -> dict[str, Any]:
    """What a command writes beside its tables: the input, every fit option
    (``options.model_dump()``), ``extra`` and the raylc version."""
    from raylc import __version__

    return {"observations": obs_uri, **options.model_dump(), **extra, "raylc": __version__}


def run_fit(
    obs_uri: str,
    out_uri: str,
    options: FitOptions = FitOptions(),
    *,
    compare_uri: Optional[str] = None,
    mapper: Optional[Mapper] = None,
    figures: bool = True,
) -> dict[str, pl.DataFrame]:
    """Fit ``obs_uri`` with ``options`` (per-subset fits mapped by ``mapper``, e.g. over Ray
    tasks; None: in process); write ``problems.parquet``, ``tasks.parquet``, figures (unless
    ``figures`` is false; and
    ``compare.parquet`` against the fit in ``compare_uri``) and ``fit.json`` (the input, the
    options and the version, last) under ``out_uri``. Local paths or s3:// throughout."""
    obs = _observations(obs_uri)
    ref = None
    if compare_uri is not None:
        ref_store = Store(compare_uri)
        ref = tuple(stored_table(schema, ref_store.read_table(schema.path), ref_store.uri(schema.path))
                    for schema in FIT_COMMAND_TABLES[:2])
        if not ref[0].height:  # a fit has a row per problem, and at least one problem
            raise StoreError(f"{ref_store.uri(FIT_COMMAND_TABLES[0].path)}: no rows, so not a fit to compare with")
    problems, tasks = fit_observations(obs, options, mapper)
    out = {"problems": problems, "tasks": tasks}
    if ref is not None:
        out["compare"] = compare_fits(ref[0], ref[1], problems, tasks)
    out = check_tables(FIT_COMMAND_TABLES, out)
    pngs = draw_figures(problems, tasks) if figures else {}  # drawn before anything is written
    Store(out_uri).write_outputs(out, {**pngs, "fit.json": settings_record(obs_uri, options, compare=compare_uri)},
                                 replaces=(*(schema.path for schema in FIT_COMMAND_TABLES), *FIGURES))
    return out


def run_sensitivity_grid(
    obs_uri: str,
    out_uri: str,
    experiments: Sequence[str],
    every: Sequence[int],
    thresholds: Sequence[float],
    options: FitOptions = FitOptions(),
    *,
    settings: Optional[dict[str, Sequence[float]]] = None,
    seed: int = 0,
    mapper: Optional[Mapper] = None,
) -> pl.DataFrame:
    """Sensitivity grid (DOLCE Section 6, Appendix K.1/K.4) as a parallel map over (task x
    setting) with ``options`` (their point estimates, :meth:`FitOptions.point_estimates`) for
    the reference and every refit; writes
    ``sensitivity.parquet``, ``sensitivity.png`` and ``sensitivity.json`` (the input, the
    options, the experiments and their settings, last)."""
    from raylc.dolce.plots import plot_sensitivity

    options = FitOptions.check(options).point_estimates()
    obs = _observations(obs_uri)
    try:
        sens = run_sensitivity(obs, experiments, mapper, every=every, thresholds=thresholds, settings=settings,
                               options=options, seed=seed)
    except ValueError as exc:
        raise StoreError(f"{obs_uri}: {exc}") from None
    SENSITIVITY.check(sens)
    if sens.height == 0:  # before anything is written
        raise StoreError(f"{obs_uri}: no sensitivity cell to compute: the threshold experiment refits only COW "
                         "problems scored with a continuous metric (F1, ROUGE, ...), and this table has none")
    pngs = png_bytes({"sensitivity.png": lambda path: plot_sensitivity(sens, path)})  # drawn before anything is written
    Store(out_uri).write_outputs({"sensitivity": sens}, {**pngs, "sensitivity.json": settings_record(
        obs_uri, options, experiments=list(experiments), every=list(every), thresholds=list(thresholds),
        settings=dict(settings or {}), seed=seed)})
    return sens

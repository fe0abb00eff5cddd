"""`raylc fit` and `raylc sensitivity`: DOLCE on an observation table, outside a full run."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import polars as pl

from raylc.dolce import ObservationError, compare_fits, fit_observations, run_sensitivity
from raylc.report import figures
from raylc.store import Store, StoreError, read_input


def _mapper(use_ray: Optional[bool]):
    """Ray tasks (joining RAY_ADDRESS or a local Ray) unless ``use_ray`` is False."""
    if use_ray is False:
        return None
    from raylc.pipeline.ray_exec import init_ray, map_tasks

    init_ray(os.environ.get("RAY_ADDRESS"))
    return map_tasks


def _observations(uri: str) -> pl.DataFrame:
    obs = read_input(uri)
    try:
        from raylc.dolce import validate_observations

        return validate_observations(obs)
    except ObservationError as exc:
        raise StoreError(f"{uri}: {exc}") from None


def run_fit(
    obs_uri: str,
    out_uri: str,
    *,
    scenario: str = "auto",
    threshold: float = 0.5,
    em_steps_cow: int = 10,
    em_steps_pig: int = 5,
    pig_likelihood: str = "hit_rate",
    pig_hit_rate: str = "mode",
    compare_uri: Optional[str] = None,
    use_ray: Optional[bool] = None,
) -> dict[str, pl.DataFrame]:
    """Fit ``obs_uri``; write ``problems.parquet``, ``tasks.parquet``, figures (and ``compare.parquet``
    against the fit in ``compare_uri``) and ``fit.json`` (the input and the settings, last)
    under ``out_uri``. Local paths or s3:// throughout."""
    obs = _observations(obs_uri)
    ref = None
    if compare_uri is not None:
        ref_store = Store(compare_uri)
        ref = ref_store.read_table("problems.parquet"), ref_store.read_table("tasks.parquet")
    problems, tasks = fit_observations(
        obs, scenario=scenario, threshold=threshold, em_steps_cow=em_steps_cow, em_steps_pig=em_steps_pig,
        mapper=_mapper(use_ray), pig_likelihood=pig_likelihood, pig_hit_rate=pig_hit_rate,
    )
    out = {"problems": problems, "tasks": tasks}
    if ref is not None:
        out["compare"] = compare_fits(ref[0], ref[1], problems, tasks)
    pngs = figures(problems, tasks)  # drawn before anything is written
    store = Store(out_uri)
    for name, frame in out.items():
        store.write_table(frame, f"{name}.parquet")
    for name, data in pngs.items():
        store.write_bytes(data, name)
    from raylc import __version__

    store.write_json({"observations": obs_uri, "scenario": scenario, "threshold": threshold,
                      "em_steps_cow": em_steps_cow, "em_steps_pig": em_steps_pig, "pig_likelihood": pig_likelihood,
                      "pig_hit_rate": pig_hit_rate, "compare": compare_uri, "raylc": __version__}, "fit.json")
    return out


def run_sensitivity_grid(
    obs_uri: str, out_uri: str, experiments: Sequence[str], every: Sequence[int], thresholds: Sequence[float],
    use_ray: Optional[bool] = None, settings: Optional[dict[str, Sequence[float]]] = None, seed: int = 0,
) -> pl.DataFrame:
    """Sensitivity grid (DOLCE Section 6, Appendix K.1/K.4) as a parallel map over (task x setting)."""
    from raylc.plots import plot_sensitivity

    obs = _observations(obs_uri)
    try:
        sens = run_sensitivity(obs, experiments, _mapper(use_ray), every=every, thresholds=thresholds,
                               settings=settings, seed=seed)
    except ValueError as exc:
        raise StoreError(f"{obs_uri}: {exc}") from None
    if sens.height == 0:  # before anything is written
        raise StoreError(f"{obs_uri}: no sensitivity cell to compute: the threshold experiment refits only COW "
                         "problems scored with a continuous metric (F1, ROUGE, ...), and this table has none")
    store = Store(out_uri)
    store.write_table(sens, "sensitivity.parquet")
    with tempfile.TemporaryDirectory() as tmp:
        png = plot_sensitivity(sens, Path(tmp, "sensitivity.png"))
        store.write_bytes(Path(png).read_bytes(), "sensitivity.png")
    return sens

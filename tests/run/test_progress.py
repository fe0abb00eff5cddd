"""The infer stage's time left (:func:`raylc.run.progress.eta_rate`): simulated shards through
:class:`InferProgress` with a fake clock, then the ETA that ``raylc status`` and the progress line
give after each shard."""

from __future__ import annotations

import polars as pl
import pytest

from raylc.run.manifest import Manifest, StageRecord
from raylc.run.progress import RECENT_POINTS, InferProgress, infer_progress


def _run(shards: list[tuple[float, int]], total: int, started: float = 0.0):
    """An attempt of ``total`` requests started at ``started`` whose shards (time, rows) are
    stored in order; returns the progress and the predicted finish time after each shard."""
    clock = iter([started, *(t for t, _ in shards)])
    manifest = Manifest(run_id="r", job={})
    prog = InferProgress(manifest, reused=0, save=lambda: None, clock=lambda: next(clock))
    prog.planned(total)
    finishes = []
    for t, rows in shards:
        prog.stored(pl.DataFrame({"error": [None] * rows}))
        p = infer_progress(manifest.stages["infer"], "running", t)
        finishes.append(t + p.get("eta_s", 0.0))
    return prog, finishes


def _rounds(total: int = 756, in_flight: int = 8, start_up: float = 300.0, round_s: float = 780.0,
            spread_s: float = 60.0, batch: int = 64) -> list[tuple[float, int]]:
    """An engine that runs ``in_flight`` batches at once: each round of batches ends together
    (within ``spread_s``) ``round_s`` after the previous one, the first after ``start_up``."""
    n = -(-total // batch)
    return [(start_up + round_s * (i // in_flight + 1) + spread_s * (i % in_flight) / in_flight,
             min(batch, total - i * batch)) for i in range(n)]


def test_the_eta_of_batches_that_end_in_bursts_moves_smoothly():
    """756 requests, 8 batches of 64 in flight, the first shard 18 min in and seven more within the
    minute (issue 39's run). A rate from the first shard alone gives 3.5 h, then 19 min, at the next
    shard (an 11x drop); here each estimate of the finish moves by less than 2x from the last, and
    those of the last third are within 30% of the true finish."""
    shards = _rounds()
    _, finishes = _run(shards, 756)
    truth = shards[-1][0]
    steps = [max(a, b) / min(a, b) for a, b in zip(finishes, finishes[1:])]
    assert max(steps) < 2.0, [round(f) for f in finishes]
    assert all(abs(f - truth) <= 0.3 * truth for f in finishes[-len(finishes) // 3:]), [round(f) for f in finishes]


def test_a_steady_run_gets_the_steady_rate_once_it_has_run_twice_as_long_as_its_first_shard_took():
    """A 60 s start-up, then 64 requests every 30 s, the first at 90 s: from 180 s on the ETA is
    the steady rate's, exactly (before that the start-up is in the window and the ETA errs long,
    never short)."""
    shards = [(60.0 + 30.0 * i, 64) for i in range(1, 101)]
    _, finishes = _run(shards, 6400)
    truth = shards[-1][0]
    for (t, _), finish in zip(shards, finishes):
        if t >= 180.0:
            assert finish == pytest.approx(truth), t
        else:
            assert finish > truth


def test_a_stall_lengthens_the_eta():
    """Measured to now, not to the last shard: while nothing is stored, the time left grows."""
    prog, _ = _run([(100.0 + 10.0 * i, 10) for i in range(1, 11)], 1000)
    record = StageRecord(status="running", progress=prog.record)
    etas = [infer_progress(record, "running", now)["eta_s"] for now in (200.0, 400.0, 800.0)]
    assert etas[0] < etas[1] < etas[2]


def test_shard_points_are_thinned_over_the_whole_attempt():
    """A long attempt keeps at most RECENT_POINTS shard points, the newest among them, spread from
    its start to now, so the window's start is found at any elapsed time."""
    prog, finishes = _run([(float(i), 1) for i in range(1, 5001)], 10_000)
    points = prog.record.recent
    assert len(points) <= RECENT_POINTS and points[-1] == (5000.0, 5000)
    assert points[0][0] <= 5000 / RECENT_POINTS and max(b[0] - a[0] for a, b in zip(points, points[1:])) <= 5000 / 16
    assert finishes[-1] == pytest.approx(10_000.0, rel=0.02)  # 1 request/s: 5,000 left

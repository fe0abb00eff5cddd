"""Engine busy fraction, throughput and actor memory: today's vLLM path against the new one.

Both paths run in one process, one after the other, against the same timed vLLM double
(``tests/doubles/vllm``, one ``double.json``) and the same real byte-level BPE tokenizer
(``doubles.model_dir.make_model_dir``), on the same DOLCE-style workload:

* **old** -- today's path, reconstructed here from the code at commit 6eebbf7 (``git show
  6eebbf7:raylc/run/ray_exec.py`` / ``:raylc/backends/vllm_engine.py``): the span rows go
  to the object store in blocks (``ray.put`` + ``ray.data.from_arrow_refs``), one Ray Data actor
  per engine holds the whole problems table (a constructor argument) and, per batch, renders the
  prompts, fits them into the window, tokenizes them with the engine's tokenizer, then blocks in
  the synchronous ``vllm.LLM.generate``; the engine idles while the actor prepares.
* **new** -- raylc's real code: the problems table stored with row groups of
  ``PROBLEM_ROW_GROUP`` problems, the request rows written with ``RunFolder.write_requests``, and
  ``pipeline.stream``: ``PrepareActor`` (CPU: render, fit, tokenize) then
  ``EngineActor`` (``AsyncLLM``, ``max_concurrent_batches`` batches in flight).

Prints for each path: the engine busy fraction, ``busy_s / (last_finish_t - first_request_t)``
from the double's stats files (summed over engines); requests/s over the stream's wall time; the
peak RSS of each inference actor (psutil, every 0.2 s, Ray worker processes grouped by the actor
class in their process title) and the double's own ``peak_rss_bytes``; and the ratios new/old.
Also the double's ``prefill_tokens_per_s`` and the CPU prepare rate measured in the run (raylc's
``prepare`` timed in the driver on the first request files, and the old actor's own prepare time
per batch), i.e. how much engine time per second of CPU work the figures assume.

``--memory`` (acceptance item 3): peak RSS of each inference actor with ``--memory-problems``
(100 and 1,000) problems of the same size (same tokens per problem) and the same requests
(``--requests``, default 200 there), and the ratios 1000/100 per actor (target for the new
path: <= 1.2).

The double is far faster than a GPU here (a run would take hours otherwise), so what matters is
the ratio of engine time to CPU prepare time per token, which the run prints: the default makes
the engine 2.5-4 times slower than one prepare core -- the engine is the bottleneck, but not by
so much that the old path's serial prepare would vanish in the noise. A real GPU against a fast
tokenizer is a larger ratio, where the old path's idle share (about 1 / (1 + ratio)) is smaller.

Workload: ``--requests`` prompts of ``--min-tokens``..``--max-tokens`` tokens (log-uniform)
over ``--problems`` problems; a problem is ``task, problem_id, L, units, question, answer``
with units drawn from a pool of English-like sentences (``english_like_text``); a request is
a span ``task, problem_id, L, C, start`` whose C units starting at ``start`` have the target
token count minus the template's. Rows go in ``prefix_order`` (as the DOLCE infer stage sends them).
No timed asserts; exits 0.

    .venv/bin/python tests/benchmarks/bench_engine_pipeline.py --quick      # smoke: 60 requests, 2K-16K tokens
    .venv/bin/python tests/benchmarks/bench_engine_pipeline.py              # 2000 requests, 8K-128K tokens
    .venv/bin/python tests/benchmarks/bench_engine_pipeline.py --memory     # 100 vs 1,000 problems
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import ray  # noqa: E402,I001  (first: Ray puts its vendored psutil, ray/thirdparty_files, on sys.path)
import psutil  # noqa: E402,I001

from raylc.backends.base import generation, generations_frame, prompt_parts, prompt_text, request_max_tokens  # noqa: E402
from raylc.dolce import stages  # noqa: E402
from raylc.dolce.plan import prefix_order  # noqa: E402
from raylc.backends.stages import PROBLEM_ROW_GROUP, PromptTokenizer, prepare  # noqa: E402
from raylc.run import pipeline  # noqa: E402
from raylc.run.folder import RunFolder  # noqa: E402
from raylc.spec import Job  # noqa: E402
from raylc.text.prompts import render_prompt_parts  # noqa: E402
from raylc.text.truncation import PromptTooLong, fit_to_window  # noqa: E402

from doubles import DOUBLES_DIR  # noqa: E402
from doubles.model_dir import english_like_text, make_model_dir  # noqa: E402

MAX_MODEL_LEN = 262_144  # above the longest prompt: nothing is truncated (max_position_embeddings raised to match)
RUN_ID = "bench"
POOL_SENTENCES = 50_000
TEXT_SEED = 0  # make_model_dir trains its BPE on english_like_text(seed=0): the words are in its vocabulary
UNIT_MARGIN = 1.25  # a problem's units hold this many times the longest context (room for the starts)
LEGACY = "LegacyInferActor"
NEW_ACTORS = ("PrepareActor", "EngineActor")
GIB = 1 << 30
MIB = 1 << 20


# ------------------------------------------------------------------------------------------------
# Today's path, reconstructed from commit 6eebbf7 (git show 6eebbf7:raylc/backends/vllm_engine.py,
# 6eebbf7:raylc/run/ray_exec.py, 6eebbf7:raylc/dolce/stages.py). Same logic; the only
# additions are timers around the prepare and generate phases, written to ``timings`` (one JSON
# line per batch) so that the run can report the old actor's CPU prepare rate.


def head_engine_kwargs(probe: Any) -> dict[str, Any]:
    """6eebbf7 ``vllm_engine.engine_kwargs``: today's :func:`raylc.backends.vllm_engine.engine_kwargs`
    without the two arguments added since (``disable_log_stats``, so ``LLM`` turns stats off, and
    ``max_num_seqs``)."""
    from raylc.backends.vllm_engine import engine_kwargs

    return {k: v for k, v in engine_kwargs(probe).items() if k not in ("disable_log_stats", "max_num_seqs")}


def head_sampling_kwargs(params: Any) -> dict[str, Any]:
    """6eebbf7 ``vllm_engine.sampling_kwargs``: unchanged since."""
    from raylc.backends.vllm_engine import sampling_kwargs

    return sampling_kwargs(params)


class HeadEngineTokenizer:
    """6eebbf7 ``vllm_engine._EngineTokenizer``: the engine's tokenizer (``LLM.get_tokenizer()``) as
    truncation sees it; ``count`` is the length of the ids sent."""

    def __init__(self, tok: Any, chat_template: bool):
        self.tok = tok
        self.chat_template = chat_template
        self.name = "vllm-engine"
        self._last: tuple[str, list[int]] = ("", [])

    def prompt_ids(self, text: str) -> list[int]:
        if self._last[0] == text and self._last[1]:
            return self._last[1]
        if not self.chat_template:
            ids = list(self.tok.encode(text))
        else:
            rendered = self.tok.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
            ids = (list(rendered) if not isinstance(rendered, str)
                   else list(self.tok.encode(rendered, add_special_tokens=False)))
        self._last = (text, ids)
        return ids

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(list(ids))

    def count(self, text: str) -> int:
        return len(self.prompt_ids(text))


def _head_latency(output: Any, batch_s: float) -> float:
    m = getattr(output, "metrics", None)
    queued, last = getattr(m, "queued_ts", 0.0) or 0.0, getattr(m, "last_token_ts", 0.0) or 0.0
    return float(last - queued) if queued > 0 and last >= queued else batch_s


class HeadVLLMBackend:
    """6eebbf7 ``vllm_engine.VLLMBackend``: one synchronous ``vllm.LLM`` (built on first use);
    ``generate`` fits and tokenizes the whole batch, then one blocking ``llm.generate``."""

    def __init__(self, probe: Any):
        self.probe = probe
        self._llm: Any = None
        self._tok: Optional[HeadEngineTokenizer] = None
        self.last: dict[str, float] = {}  # benchmark timers of the last call

    @property
    def llm(self) -> Any:
        if self._llm is None:
            import vllm

            self._llm = vllm.LLM(**head_engine_kwargs(self.probe))
        return self._llm

    def tokenizer(self) -> HeadEngineTokenizer:
        if self._tok is None:
            tok = HeadEngineTokenizer(self.llm.get_tokenizer(), self.probe.chat_template)
            tok.prompt_ids("")
            self._tok = tok
        return self._tok

    def prepare(self, prompt: Any, max_tokens: int) -> tuple[Optional[list[int]], int, Optional[str], int]:
        tok = self.tokenizer()
        p = self.probe
        try:
            text, cut = fit_to_window(*prompt_parts(prompt), tok, p.max_model_len, max_tokens, p.truncation)
        except PromptTooLong as exc:
            return None, 0, f"prompt too long: {exc}", tok.count(prompt_text(prompt))
        ids = tok.prompt_ids(text)
        return ids, cut, None, len(ids)

    def generate(self, prompts: Sequence[Any], max_tokens: Any = None) -> list[dict[str, Any]]:
        import vllm

        llm = self.llm
        limits = request_max_tokens(max_tokens, len(prompts), self.probe.generation.max_tokens)
        t_prep = time.perf_counter()
        prepared = [self.prepare(p, m) for p, m in zip(prompts, limits)]
        todo = [i for i, (ids, *_rest) in enumerate(prepared) if ids is not None]
        outputs: list[Any] = []
        t0 = time.perf_counter()
        if todo:
            tokens_prompt = getattr(vllm, "TokensPrompt", dict)
            requests = [tokens_prompt(prompt_token_ids=prepared[i][0]) for i in todo]
            base = head_sampling_kwargs(self.probe.generation)
            if len({limits[i] for i in todo}) == 1:
                params: Any = vllm.SamplingParams(**{**base, "max_tokens": limits[todo[0]]})
            else:
                params = [vllm.SamplingParams(**{**base, "max_tokens": limits[i]}) for i in todo]
            outputs = llm.generate(requests, params, use_tqdm=False)
        batch_s = time.perf_counter() - t0
        self.last = {"fit_tokenize_s": t0 - t_prep, "generate_s": batch_s,
                     "tokens": float(sum(n for *_r, n in prepared))}
        results = [generation(prompt_tokens=n, error=err, truncated_tokens=cut) for _, cut, err, n in prepared]
        for i, out in zip(todo, outputs):
            _, cut, _, n = prepared[i]
            comp = out.outputs[0]
            reason = comp.finish_reason
            results[i] = generation(
                comp.text,
                prompt_tokens=len(out.prompt_token_ids) if out.prompt_token_ids is not None else n,
                generated_tokens=len(comp.token_ids),
                cached_tokens=out.num_cached_tokens,
                finish_reason=reason,
                latency_s=_head_latency(out, batch_s),
                error=f"vLLM finished the request with {reason!r}" if reason in ("abort", "error") else None,
                truncated_tokens=cut,
            )
        return results


class LegacyInferActor:
    """6eebbf7 ``ray_exec._InferActor`` with the vLLM backend: holds the whole problems table and
    the backend; per batch ``stages.infer`` (render every span's prompt, then ``backend.generate``)."""

    def __init__(self, job: Job, problems: pl.DataFrame, timings: str = ""):
        self.job = job
        self.problems = problems
        self.backend = HeadVLLMBackend(job.probe)  # 6eebbf7 make_backend(job, problems) for probe.backend vllm
        self.timings = timings

    def __call__(self, batch: pa.Table) -> pa.Table:
        t0 = time.perf_counter()
        spans: pl.DataFrame = pl.from_arrow(batch)  # type: ignore[assignment]
        # 6eebbf7 stages.infer
        parts = render_prompt_parts(spans, self.problems)
        prompts = list(zip(parts["head"].to_list(), parts["context"].to_list(), parts["tail"].to_list()))
        render_s = time.perf_counter() - t0
        out = pl.concat([spans, generations_frame(self.backend.generate(prompts))], how="horizontal").to_arrow()
        if self.timings:
            record = {"render_s": render_s, **self.backend.last, "rows": spans.height,
                      "total_s": time.perf_counter() - t0}
            with open(os.path.join(self.timings, f"timings-{os.getpid()}.jsonl"), "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
        return out


def head_configure_data(job: Job, no_progress_default: float) -> None:
    """6eebbf7 ``ray_exec._configure_data`` (the no-progress guard left at Ray's default)."""
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.execution_no_progress_timeout_s = (job.ray.no_progress_timeout_s if job.ray.no_progress_timeout_s is not None
                                           else no_progress_default)
    ctx.enable_progress_bars = True
    ctx.print_on_execution_start = False
    ctx.raise_original_map_exception = True


def head_stream(chunks: Iterable[pl.DataFrame], problems: pl.DataFrame, job: Job, timings: str,
                no_progress_default: float) -> Iterator[pl.DataFrame]:
    """6eebbf7 ``ray_exec.infer_on_ray`` -> ``_stream`` with ``pool_options`` for vLLM: blocks of
    4 x ``batch_size`` rows through ``ray.put``, ``replicas`` actors of max(1, ``actor_num_cpus``)
    CPUs and ``tensor_parallel_size`` GPUs each."""
    import ray.data

    head_configure_data(job, no_progress_default)
    size = max(job.ray.batch_size * 4, 1)
    refs = [ray.put(chunk.slice(i, size).to_arrow()) for chunk in chunks for i in range(0, chunk.height, size)]
    if not refs:
        return
    ds = ray.data.from_arrow_refs(refs).map_batches(
        LegacyInferActor, fn_constructor_kwargs={"job": job, "problems": problems, "timings": timings},
        batch_size=job.ray.batch_size, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=job.probe.replicas),
        num_cpus=max(1.0, job.ray.actor_num_cpus), num_gpus=job.probe.tensor_parallel_size,
    )
    for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        yield pl.from_arrow(batch)  # type: ignore[misc]


# ------------------------------------------------------------------------------------------------
# Workload


@dataclass
class Workload:
    problems: pl.DataFrame
    spans: pl.DataFrame  # task, problem_id, L, C, start, _target (the prompt tokens aimed at)
    target_tokens: np.ndarray  # prompt tokens aimed at, per request
    units_per_problem: int
    tokens_per_problem: float
    problems_bytes: int = 0  # in-memory size of the problems table


class SentencePool:
    """English-like sentences and their token counts (as units joined by spaces)."""

    def __init__(self, tokenizer_json: Path, size: int, seed: int):
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(tokenizer_json))
        self.sentences = english_like_text(size, seed=seed)
        enc = self.tok.encode_batch([" " + s for s in self.sentences], add_special_tokens=False)
        self.tokens = np.array([len(e.ids) for e in enc], dtype=np.int64)
        self.arrow = pa.array(self.sentences, type=pa.large_string())

    def count(self, text: str) -> int:
        return len(self.tok.encode(text).ids)


def build_workload(pool: SentencePool, n_problems: int, n_requests: int, min_tokens: int, max_tokens: int,
                   seed: int) -> Workload:
    """``n_problems`` problems of equal size (units for ``UNIT_MARGIN`` times the longest context)
    and ``n_requests`` spans spread evenly over them (request i on problem i * n_problems //
    n_requests), each starting at a uniform random unit among those that leave room for its
    context. Request i has the same target length and start fraction for any ``n_problems``."""
    rng = np.random.default_rng(seed)
    question = "What is the number that the context assigns to the blue key?"
    head, tail = [render_prompt_parts(pl.DataFrame({"problem_id": ["x"], "C": [1], "start": [0]}),
                                      pl.DataFrame({"problem_id": ["x"], "units": [["u"]], "question": [question]}))
                  [c][0] for c in ("head", "tail")]
    overhead = pool.count(head + tail)
    targets = np.exp(rng.uniform(math.log(min_tokens), math.log(max_tokens), n_requests))
    start_frac = rng.uniform(0.0, 1.0, n_requests)
    ctx_targets = np.maximum(targets - overhead, 1.0)

    mean = float(pool.tokens.mean())
    n_units = int(math.ceil(UNIT_MARGIN * (max_tokens - overhead) / mean)) + 64
    prng = np.random.default_rng(seed + 1)
    idx = prng.integers(0, len(pool.sentences), size=(n_problems, n_units))
    counts = pool.tokens[idx]
    cum = np.concatenate([np.zeros((n_problems, 1), dtype=np.int64), np.cumsum(counts, axis=1)], axis=1)
    assert (cum[:, -1] >= max_tokens).all(), "a problem is shorter than the longest context"
    values = pc.take(pool.arrow, pa.array(idx.ravel()))
    offsets = pa.array(np.arange(0, n_problems * n_units + 1, n_units, dtype=np.int64))
    units = pa.LargeListArray.from_arrays(offsets, values)
    ids = [f"p{i:05d}" for i in range(n_problems)]
    problems = pl.DataFrame({
        "task": ["bench"] * n_problems,
        "problem_id": ids,
        "L": [n_units] * n_problems,
        "units": pl.from_arrow(units).cast(pl.List(pl.String)),
        "question": [question] * n_problems,
        "answer": [str(i) for i in range(n_problems)],
    })

    rows = {"task": [], "problem_id": [], "L": [], "C": [], "start": []}
    for i in range(n_requests):
        p = (i * n_problems) // n_requests
        c = cum[p]
        T = ctx_targets[i]
        s_max = int(np.searchsorted(c, c[-1] - T, side="right")) - 1
        s = min(int(start_frac[i] * (s_max + 1)), s_max)
        C = max(int(np.searchsorted(c, c[s] + T, side="left")) - s, 1)
        rows["task"].append("bench")
        rows["problem_id"].append(ids[p])
        rows["L"].append(n_units)
        rows["C"].append(C)
        rows["start"].append(s)
    spans = pl.DataFrame(rows, schema={"task": pl.String, "problem_id": pl.String, "L": pl.Int64, "C": pl.Int64,
                                       "start": pl.Int64})
    spans = spans.with_columns(_target=pl.Series(targets))
    return Workload(problems, spans, targets, n_units, float(cum[:, -1].mean()), problems.estimated_size())


def with_ids_in_order(work: Workload, job: Job) -> pl.DataFrame:
    """The span rows as the DOLCE infer stage sends them: request ids, prefix order."""
    spans = stages.with_request_ids(work.spans.drop("_target"), work.problems, job)
    return prefix_order(spans)


# ------------------------------------------------------------------------------------------------
# Measurement


_UDF = re.compile(r"MapBatches\((\w+)\)")


def ray_workers() -> Iterator[tuple[psutil.Process, str, Optional[str]]]:
    """``(process, title, UDF class)`` of the Ray worker processes of this script's own Ray
    instance (descendants of this process: another Ray on the machine, e.g. a test run's, is left
    out); the class is the one in the Ray Data actor's title, ``ray::MapWorker(MapBatches(Cls))...``."""
    for proc in psutil.Process(os.getpid()).children(recursive=True):
        try:
            title = " ".join(proc.cmdline()).strip()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if title.startswith("ray::"):
            m = _UDF.search(title)
            yield proc, title, m.group(1) if m else None


class RssMonitor:
    """Peak RSS of this script's Ray worker processes, every ``interval`` s, attributed per pid
    to the Ray Data UDF class (one of ``labels``) its title has shown."""

    def __init__(self, labels: Sequence[str], interval: float = 0.2):
        self.labels, self.interval = tuple(labels), interval
        self.peak: dict[int, int] = {}
        self.label: dict[int, str] = {}
        self.titles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "RssMonitor":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        for proc, title, udf in ray_workers():
            try:
                rss = proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            pid = proc.pid
            self.peak[pid] = max(self.peak.get(pid, 0), rss)
            if pid not in self.label and udf in self.labels:
                self.label[pid] = udf
                self.titles[pid] = title.split()[0].rsplit(".", 1)[0]

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def by_label(self) -> dict[str, tuple[int, int]]:
        """label -> (peak RSS of its largest actor, number of actor processes)."""
        out: dict[str, tuple[int, int]] = {}
        for pid, lab in self.label.items():
            peak, n = out.get(lab, (0, 0))
            out[lab] = (max(peak, self.peak.get(pid, 0)), n + 1)
        return out


def wait_torn_down(labels: Sequence[str], timeout: float = 180.0) -> float:
    """Wait until no process titled with one of ``labels`` is alive and the GPU is free again;
    returns the seconds waited."""

    t0 = time.perf_counter()
    while True:
        alive = [proc.pid for proc, _title, udf in ray_workers() if udf in labels]
        if not alive and ray.available_resources().get("GPU", 0) >= 1:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            print(f"warning: pool not torn down after {timeout:.0f} s (pids {alive})", file=sys.stderr)
            return time.perf_counter() - t0
        time.sleep(0.5)


class WarmUp:
    """A no-op Ray Data actor UDF: one pass before the measured paths starts Ray Data and the
    worker processes, so that neither path's wall time pays for it."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch


def warm_up(num_cpus: float) -> None:
    import ray.data

    ray.data.range(64, override_num_blocks=4).map_batches(
        pipeline.bound(WarmUp, "WarmUp"), batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=1),
        num_cpus=num_cpus).materialize()
    wait_torn_down(["WarmUp"])


def collect_stats(stats_dir: Path, tag: str) -> list[dict[str, Any]]:
    """The double's stats files written since the last call, moved into ``stats_dir/tag``."""
    dest = stats_dir / tag
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for path in sorted(stats_dir.glob("stats-*.json")):
        out.append(json.loads(path.read_text()))
        shutil.move(str(path), str(dest / path.name))
    return out


def busy_fraction(engines: list[dict[str, Any]]) -> float:
    busy = sum(e["busy_s"] for e in engines)
    span = sum((e["last_finish_t"] or 0) - (e["first_request_t"] or 0) for e in engines if e["first_request_t"])
    return busy / span if span > 0 else float("nan")


@dataclass
class PathResult:
    name: str
    wall_s: float = 0.0
    rows: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    engines: list[dict[str, Any]] = field(default_factory=list)
    rss: dict[str, tuple[int, int]] = field(default_factory=dict)
    titles: list[str] = field(default_factory=list)
    timings: list[dict[str, float]] = field(default_factory=list)
    setup_s: float = 0.0  # new: writing the problems table and the request files
    teardown_s: float = 0.0
    start_t: float = 0.0  # time.time() when the stream started
    end_t: float = 0.0  # time.time() when its last batch arrived

    def timeline(self) -> str:
        """When the engines got their first request and finished their last, against the stream."""
        first = min((e["first_request_t"] for e in self.engines if e["first_request_t"]), default=None)
        last = max((e["last_finish_t"] for e in self.engines if e["last_finish_t"]), default=None)
        if first is None or last is None:
            return "no engine timestamps"
        return (f"first request reached the engine {first - self.start_t:.1f} s after the stream started, "
                f"the last finished {self.end_t - last:.1f} s before its end")

    @property
    def busy(self) -> float:
        return busy_fraction(self.engines)

    @property
    def rps(self) -> float:
        return self.rows / self.wall_s if self.wall_s else float("nan")

    @property
    def engine_rss(self) -> int:
        return max((int(e.get("peak_rss_bytes") or 0) for e in self.engines), default=0)


def consume(stream: Iterator[pl.DataFrame], result: PathResult) -> None:
    result.start_t = time.time()
    for batch in stream:
        result.rows += batch.height
        result.errors += int(batch["error"].is_not_null().sum())
        result.prompt_tokens += int(batch["prompt_tokens"].fill_null(0).sum())
    result.end_t = time.time()


def run_old(job: Job, work: Workload, spans: pl.DataFrame, scratch: Path, stats_dir: Path, tag: str,
            no_progress_default: float) -> PathResult:
    timings = scratch / f"timings-{tag}"
    timings.mkdir(parents=True, exist_ok=True)
    result = PathResult("old")
    with RssMonitor([LEGACY]) as mon:
        t0 = time.perf_counter()
        consume(head_stream([spans], work.problems, job, str(timings), no_progress_default), result)
        result.wall_s = time.perf_counter() - t0
        result.teardown_s = wait_torn_down([LEGACY])
        mon.sample()
    result.rss, result.titles = mon.by_label(), sorted(set(mon.titles.values()))
    result.engines = collect_stats(stats_dir, tag)
    for path in timings.glob("*.jsonl"):
        result.timings += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return result


def write_new_inputs(job: Job, work: Workload, spans: pl.DataFrame) -> tuple[tuple[str, ...], float]:
    """The new path's inputs as the DOLCE runner writes them: problems with small row groups,
    the pending request rows as files of ``block_rows(job)`` rows."""
    t0 = time.perf_counter()
    folder = RunFolder(job.store.path, RUN_ID)
    folder.delete("")
    folder.write(work.problems, "build/problems.parquet", row_group_size=PROBLEM_ROW_GROUP)
    files = folder.write_requests([spans], pipeline.block_rows(job))
    return files, time.perf_counter() - t0


def run_new(job: Job, files: tuple[str, ...], stats_dir: Path, tag: str) -> PathResult:
    result = PathResult("new")
    source = pipeline.RequestFiles(RunFolder(job.store.path, RUN_ID), files, "build/problems.parquet")
    with RssMonitor(NEW_ACTORS) as mon:
        t0 = time.perf_counter()
        consume(pipeline.stream(source, job), result)
        result.wall_s = time.perf_counter() - t0
        result.teardown_s = wait_torn_down(NEW_ACTORS)
        mon.sample()
    result.rss, result.titles = mon.by_label(), sorted(set(mon.titles.values()))
    result.engines = collect_stats(stats_dir, tag)
    return result


def calibrate_prepare(
    job: Job, files: tuple[str, ...], min_tokens: int = 2_000_000, max_files: int = 8
) -> tuple[float, int]:
    """raylc's prepare stage (read the request file, render from the stored problems, fit,
    tokenize) timed in this process on the first request files: (tokens/s, tokens)."""
    from raylc.backends.vllm_engine import tokenizer_spec

    source = pipeline.RequestFiles(RunFolder(job.store.path, RUN_ID), files, "build/problems.parquet")
    tok = PromptTokenizer.load(tokenizer_spec(job.probe), job.probe.chat_template)
    problems = source.inputs().problems
    tokens, seconds = 0, 0.0
    for f in files[:max_files]:
        t0 = time.perf_counter()
        out = prepare(source.rows(pa.table({pipeline.FILE: [f]})), problems, job, tok)
        seconds += time.perf_counter() - t0
        tokens += int(out["prompt_tokens"].sum())
        if tokens >= min_tokens:
            break
    return tokens / seconds, tokens


# ------------------------------------------------------------------------------------------------
# Reporting


def mib(n: float) -> str:
    return f"{n / MIB:,.0f} MiB"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def engine_line(r: PathResult) -> str:
    e = r.engines
    return (f"{len(e)} engine(s), {sum(x['requests'] for x in e)} requests, "
            f"{sum(x['prompt_tokens'] for x in e):,} prompt tokens ({sum(x['cached_tokens'] for x in e):,} cached), "
            f"busy {sum(x['busy_s'] for x in e):.1f} s of "
            f"{sum((x['last_finish_t'] or 0) - (x['first_request_t'] or 0) for x in e):.1f} s")


def legacy_prepare_rate(r: PathResult) -> tuple[float, float, float]:
    """(prepare tokens/s in the old actor, its prepare seconds, its generate seconds)."""
    prep = sum(t["render_s"] + t.get("fit_tokenize_s", 0.0) for t in r.timings)
    gen = sum(t.get("generate_s", 0.0) for t in r.timings)
    tokens = sum(t.get("tokens", 0.0) for t in r.timings)
    return (tokens / prep if prep else float("nan")), prep, gen


def print_throughput(args: argparse.Namespace, work: Workload, old: PathResult, new: PathResult,
                     calib: tuple[float, int], new_setup_s: float) -> None:
    old_rate, old_prep, old_gen = legacy_prepare_rate(old)
    calib_rate, calib_tokens = calib
    tokens = int(work.target_tokens.sum())
    print()
    print(f"workload: {args.requests} requests, prompts {args.min_tokens:,}-{args.max_tokens:,} tokens (log-uniform, "
          f"{tokens:,} tokens in all, mean {tokens / args.requests:,.0f}), {args.problems} problems of "
          f"{work.units_per_problem:,} units (~{work.tokens_per_problem:,.0f} tokens) each")
    print(f"engine double: prefill_tokens_per_s = {args.prefill_tokens_per_s:,.0f}, "
          f"decode_step_s = {args.decode_step_s}, "
          f"max_num_batched_tokens = {args.max_num_batched_tokens}, max_tokens = {args.max_new_tokens}; "
          f"ray.batch_size = {args.batch_size}, prepare_actors = {args.prepare_actors}, "
          f"max_concurrent_batches = {args.max_concurrent_batches}, {os.cpu_count()} CPU cores")
    print(f"CPU prepare rate (render + fit + tokenize, one core): {calib_rate:,.0f} tokens/s raylc prepare() in the "
          f"driver ({calib_tokens:,} tokens); {old_rate:,.0f} tokens/s in the old actor ({old_prep:.1f} s prepare, "
          f"{old_gen:.1f} s in LLM.generate)")
    print(f"  -> the engine needs {calib_rate / args.prefill_tokens_per_s:.2f} s of prefill per second of CPU prepare "
          f"(driver rate; {old_rate / args.prefill_tokens_per_s:.2f} with the old actor's rate)")
    print()
    rows = [
        ("engine busy fraction", f"{old.busy:.3f}", f"{new.busy:.3f}", ratio(new.busy, old.busy)),
        ("requests/s (stream wall time)", f"{old.rps:.3f}", f"{new.rps:.3f}", ratio(new.rps, old.rps)),
        ("stream wall time", f"{old.wall_s:.1f} s", f"{new.wall_s:.1f} s", ratio(new.wall_s, old.wall_s)),
    ]
    old_actor = old.rss.get(LEGACY, (0, 0))[0]
    for lab in NEW_ACTORS:
        peak = new.rss.get(lab, (0, 0))[0]
        rows.append((f"peak RSS {lab} (new) / {LEGACY} (old)", mib(old_actor), mib(peak), ratio(peak, old_actor)))
    both = sum(new.rss.get(lab, (0, 0))[0] for lab in NEW_ACTORS)
    rows.append(("peak RSS all inference actors", mib(old_actor), mib(both), ratio(both, old_actor)))
    rows.append(("double's peak_rss_bytes (engine process)", mib(old.engine_rss), mib(new.engine_rss),
                 ratio(new.engine_rss, old.engine_rss)))
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  {'old (6eebbf7)':>14}  {'new':>14}  {'new/old':>8}")
    for name, a, b, c in rows:
        print(f"{name:{width}}  {a:>14}  {b:>14}  {c:>8}")
    print()
    for r in (old, new):
        print(f"{r.name}: {r.rows} rows, {r.errors} errors, {r.prompt_tokens:,} prompt tokens; {engine_line(r)}; "
              f"pool torn down {r.teardown_s:.1f} s after the stream ended")
        print(f"     {r.timeline()}")
        print(f"     actor processes: {', '.join(f'{k} x{v[1]}' for k, v in sorted(r.rss.items())) or 'none seen'} "
              f"(titles: {'; '.join(r.titles)})")
    print(f"new: problems table + {math.ceil(args.requests / args.batch_size)} request files "
          f"written in {new_setup_s:.1f} s "
          "(before the stream; not in its wall time)")


def print_memory(args: argparse.Namespace, results: dict[int, tuple[PathResult, PathResult]],
                 works: dict[int, Workload]) -> None:
    sizes = sorted(results)
    lo, hi = sizes[0], sizes[-1]
    print()
    print(f"memory: {args.requests} requests, prompts {args.min_tokens:,}-{args.max_tokens:,} tokens, problems of "
          f"{works[lo].units_per_problem:,} units (~{works[lo].tokens_per_problem:,.0f} tokens) each; "
          f"problems table in memory: " + ", ".join(f"{n} problems {mib(works[n].problems_bytes)}" for n in sizes))
    header = f"{'peak RSS':38}" + "".join(f"{f'{n} problems':>16}" for n in sizes) + f"{f'{hi}/{lo}':>10}"
    print(header)

    def row(name: str, values: list[int]) -> None:
        print(f"{name:38}" + "".join(f"{mib(v):>16}" for v in values) + f"{ratio(values[-1], values[0]):>10}")

    row(f"old {LEGACY}", [results[n][0].rss.get(LEGACY, (0, 0))[0] for n in sizes])
    row("old double peak_rss_bytes", [results[n][0].engine_rss for n in sizes])
    for lab in NEW_ACTORS:
        row(f"new {lab}", [results[n][1].rss.get(lab, (0, 0))[0] for n in sizes])
    row("new double peak_rss_bytes", [results[n][1].engine_rss for n in sizes])
    print()
    for n in sizes:
        old, new = results[n]
        print(f"{n} problems: old {old.rows} rows / {old.errors} errors, busy {old.busy:.3f}, {old.wall_s:.1f} s; "
              f"new {new.rows} rows / {new.errors} errors, busy {new.busy:.3f}, {new.wall_s:.1f} s")
        print(f"     old: {old.timeline()}; new: {new.timeline()}")
        for r in (old, new):
            print(f"     {r.name} actor processes: "
                  f"{', '.join(f'{k} x{v[1]}' for k, v in sorted(r.rss.items())) or 'none seen'} "
                  f"(titles: {'; '.join(r.titles)})")


# ------------------------------------------------------------------------------------------------


def make_job(args: argparse.Namespace, model: Path, store: Path) -> Job:
    return Job(
        name="bench-engine",
        probe={"backend": "vllm", "model": str(model), "max_model_len": MAX_MODEL_LEN, "chat_template": False,
               "hf_overrides": {"max_position_embeddings": MAX_MODEL_LEN},
               "max_num_batched_tokens": args.max_num_batched_tokens, "sampling": {"max_tokens": args.max_new_tokens},
               "truncation": "middle", "replicas": 1, "prepare_actors": args.prepare_actors,
               "max_concurrent_batches": args.max_concurrent_batches},
        store={"path": str(store)},
        ray={"batch_size": args.batch_size, "actor_num_cpus": args.actor_num_cpus},
    )


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 60 requests of 2K-16K tokens over 12 problems")
    ap.add_argument("--memory", action="store_true", help="peak RSS per actor at --memory-problems problems")
    ap.add_argument("--requests", type=int, help="requests (default 2000; 200 with --memory; 60 with --quick)")
    ap.add_argument("--problems", type=int, help="problems (default 100; 12 with --quick)")
    ap.add_argument("--memory-problems", default="100,1000", help="problem counts compared by --memory")
    ap.add_argument("--min-tokens", type=int, help="shortest prompt (default 8192; 2048 with --quick)")
    ap.add_argument("--max-tokens", type=int, help="longest prompt (default 131072; 16384 with --quick)")
    ap.add_argument("--prefill-tokens-per-s", type=float, default=200_000.0,
                    help="the double's prefill speed (default 200000: one core prepared 480K-750K tokens/s in "
                         "the runs of the README figures (2-core machine), so the engine needs 2.4-3.8 s per second "
                         "of CPU prepare and is the new path's bottleneck; the run prints the ratio it measured)")
    ap.add_argument("--decode-step-s", type=float, default=0.003, help="the double's decode step time")
    ap.add_argument("--max-num-batched-tokens", type=int, default=16384)
    ap.add_argument("--max-new-tokens", type=int, default=16, help="probe.sampling.max_tokens")
    ap.add_argument("--batch-size", type=int, default=16, help="ray.batch_size (rows per batch)")
    ap.add_argument("--actor-num-cpus", type=float, default=0.25)
    ap.add_argument("--prepare-actors", type=int, default=1)
    ap.add_argument("--max-concurrent-batches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args(argv)
    if args.quick:
        defaults = {"requests": 60, "problems": 12, "min_tokens": 2048, "max_tokens": 16384}
    else:
        defaults = {"requests": 200 if args.memory else 2000, "problems": 100, "min_tokens": 8192, "max_tokens": 131072}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.max_tokens >= MAX_MODEL_LEN - args.max_new_tokens:
        ap.error(f"--max-tokens must stay below max_model_len {MAX_MODEL_LEN} minus max_tokens")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    import ray.data

    scratch = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    stats_dir = scratch / "stats"
    double = {"prefill_tokens_per_s": args.prefill_tokens_per_s, "decode_step_s": args.decode_step_s,
              "stats_dir": str(stats_dir), "stats_interval_s": 0.1}
    model = make_model_dir(scratch / "model", double=double)
    job = make_job(args, model, scratch / "store")
    try:
        t0 = time.perf_counter()
        pool = SentencePool(model / "tokenizer.json", POOL_SENTENCES, TEXT_SEED)
        chars = sum(len(x) + 1 for x in pool.sentences) / pool.tokens.sum()
        print(f"sentence pool: {len(pool.sentences):,} sentences, {pool.tokens.mean():.1f} tokens each, "
              f"{chars:.2f} characters per token ({time.perf_counter() - t0:.1f} s)", flush=True)
        ray.init(num_cpus=os.cpu_count() or 2, num_gpus=1, include_dashboard=False, logging_level="ERROR",
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([DOUBLES_DIR, str(ROOT)])}})
        no_progress_default = ray.data.DataContext.get_current().execution_no_progress_timeout_s
        warm_up(args.actor_num_cpus)
        if args.memory:
            sizes = [int(x) for x in args.memory_problems.split(",")]
            results: dict[int, tuple[PathResult, PathResult]] = {}
            works: dict[int, Workload] = {}
            for n in sizes:
                t0 = time.perf_counter()
                work = build_workload(pool, n, args.requests, args.min_tokens, args.max_tokens, args.seed)
                spans = with_ids_in_order(work, job)
                works[n] = Workload(work.problems.head(0), work.spans, work.target_tokens, work.units_per_problem,
                                    work.tokens_per_problem, work.problems.estimated_size())
                print(f"[{n} problems] workload built in {time.perf_counter() - t0:.1f} s "
                      f"({mib(work.problems.estimated_size())} of problems)", flush=True)
                old = run_old(job, work, spans, scratch, stats_dir, f"old-{n}", no_progress_default)
                print(f"[{n} problems] old path: {old.wall_s:.1f} s", flush=True)
                files, _ = write_new_inputs(job, work, spans)
                new = run_new(job, files, stats_dir, f"new-{n}")
                print(f"[{n} problems] new path: {new.wall_s:.1f} s", flush=True)
                results[n] = (old, new)
                del work, spans
            print_memory(args, results, works)
        else:
            t0 = time.perf_counter()
            work = build_workload(pool, args.problems, args.requests, args.min_tokens, args.max_tokens, args.seed)
            spans = with_ids_in_order(work, job)
            print(f"workload built in {time.perf_counter() - t0:.1f} s", flush=True)
            files, setup_s = write_new_inputs(job, work, spans)
            calib = calibrate_prepare(job, files)
            print(f"prepare calibration: {calib[0]:,.0f} tokens/s", flush=True)
            old = run_old(job, work, spans, scratch, stats_dir, "old", no_progress_default)
            print(f"old path: {old.wall_s:.1f} s", flush=True)
            new = run_new(job, files, stats_dir, "new")
            print(f"new path: {new.wall_s:.1f} s", flush=True)
            print_throughput(args, work, old, new, calib, setup_s)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if args.keep:
            print(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

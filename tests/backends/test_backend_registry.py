"""The backend registry (issue 30, acceptance 1; issue 38, acceptances 3 and 4): no branch on a
backend's name outside raylc/backends; a backend defined here only (its config, its preflight, its
pipeline stages) parses, is checked and runs a quickstart-sized job with no edit to raylc/spec.py
or raylc/run/; a name registered twice is refused.

The toy backend is registered by the ``toy`` fixture and removed after its test, so that other
tests see the built-in backends only; a Ray worker, which imports this module to unpickle a
:class:`ToyProbe`, registers it on import."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Literal, Optional, Sequence

import polars as pl
import pytest

from raylc.backends.base import Backend, Generation, MaxTokens, Prompt, RawFlags, generation, prompt_text
from raylc.backends.config import ProbeConfig
from raylc.backends.registry import BACKENDS, BackendPlugin, backend_of, register_backend
from raylc.backends.stages import PipelineStage, text_pipeline
from raylc.spec import JobSpecError, load_job, parse_job

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "raylc"
PROBE_CLASSES = ("SimulatedProbe", "VLLMProbe", "OpenAIProbe")


def _outside_backends() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if "backends" not in p.relative_to(PACKAGE).parts]


def test_no_module_outside_the_backends_branches_on_a_backend_name():
    pattern = re.compile(r"""backend *(==|!=) *["']""")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in _outside_backends()
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_no_isinstance_on_a_concrete_probe_config_outside_the_backends_and_the_spec():
    hits = []
    for p in _outside_backends():
        if p.name == "spec.py" and p.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
                names = {n.id if isinstance(n, ast.Name) else getattr(n, "attr", None) for n in ast.walk(node.args[1])}
                if names & set(PROBE_CLASSES):
                    hits.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not hits, hits


# --- a toy backend, defined here only ----------------------------------------------------------


class ToyProbe(ProbeConfig):
    """An oracle that answers a planted problem iff its context holds one of the vault's clues."""

    backend: Literal["toy"]
    model: str = "toy-oracle"
    closed_log: Optional[str] = None  #: a file the backend logs built/served/closed to (the test of close)

    def model_name(self) -> str:
        return self.model


class ToyBackend(Backend):
    name = "toy"

    def __init__(self, answers: dict[str, str], closed_log: Optional[str] = None):
        self.answers, self.closed_log, self.served = answers, closed_log, False
        self._log("built")

    def _log(self, event: str) -> None:
        """Append ``event pid`` to ``closed_log``: the test of close tells the actors apart."""
        if self.closed_log:
            with open(self.closed_log, "a", encoding="utf-8") as fh:
                fh.write(f"{event} {os.getpid()}\n")

    def close(self) -> None:
        self._log("closed")

    def generate(self, prompts: Sequence[Prompt], max_tokens: MaxTokens = None,
                 raw: RawFlags = None) -> list[Generation]:
        if not self.served:
            self.served = True
            self._log("served")
        out = []
        for p in map(prompt_text, prompts):
            vault = re.search(r"What is the code of vault (\S+)\?", p)
            seen = vault is not None and f"for vault {vault.group(1)}:" in p
            text = self.answers.get(vault.group(1), "?") if seen else "Unanswerable"  # type: ignore[union-attr]
            out.append(generation(text, prompt_tokens=len(p.split()), generated_tokens=1, latency_s=None))
        return out


def toy_backend(job, table: Optional[pl.LazyFrame]) -> Backend:
    """The oracle, knowing the suite's planted answers."""
    known = table.select("problem_id", "answer").collect() if table is not None else pl.DataFrame(
        schema={"problem_id": pl.String, "answer": pl.String})
    return ToyBackend(dict(zip(known["problem_id"].to_list(), known["answer"].to_list())), job.probe.closed_log)


class ToyPreflight:
    """What ``raylc check`` prints for a toy probe."""

    warnings: list[str] = []

    def __init__(self, section: str, model: str):
        self.section, self.model = section, model

    def lines(self) -> list[str]:
        return [f"{self.section}: toy oracle {self.model} needs nothing"]


class Toy(BackendPlugin):
    probe = ToyProbe

    def stages(self, job, verbose: bool) -> list[PipelineStage]:
        return text_pipeline(job, toy_backend)

    def preflight(self, job, section: str, **options) -> ToyPreflight:
        return ToyPreflight(section, getattr(job, section).model)


def _in_ray_worker() -> bool:
    import ray

    return ray.is_initialized() and ray._private.worker.global_worker.mode == ray.WORKER_MODE


if _in_ray_worker():
    register_backend(Toy)


@pytest.fixture
def toy():
    register_backend(Toy)
    yield Toy
    BACKENDS._entries.pop("toy", None)


def test_a_registered_backend_parses_and_its_bad_keys_are_one_line(toy):
    job = parse_job({"name": "t", "probe": {"backend": "toy"}})
    assert isinstance(job.probe, ToyProbe) and isinstance(backend_of(job.probe), toy)
    assert job.model_name() == "toy-oracle" and job.max_tokens() == 32 and job.window() is None
    assert job.resolved()["probe"] == {"backend": "toy", "model": "toy-oracle", "closed_log": None}
    with pytest.raises(JobSpecError, match=r"^<job>: unknown key 'probe.temperature' \(allowed: backend, model, "
                                           r"closed_log\)$"):
        parse_job({"name": "t", "probe": {"backend": "toy", "temperature": 1}})
    with pytest.raises(JobSpecError, match=r"^<job>: key 'judge.backend': 'nope' is not one of 'simulated', 'vllm', "
                                           r"'openai', .*'toy'"):
        parse_job({"name": "t", "judge": {"backend": "nope"}})


def test_the_toy_backends_preflight_is_what_raylc_check_prints(toy, tmp_path):
    from cli_runner import raylc

    job_file = tmp_path / "toy.yaml"
    job_file.write_text("name: t\nprobe: {backend: toy, model: oracle-7}\njudge: {backend: toy}\n")
    out = raylc("check", job_file)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["probe: toy oracle oracle-7 needs nothing",
                                       "judge: toy oracle toy-oracle needs nothing"]


@pytest.mark.ray
def test_a_toy_backend_runs_a_quickstart_sized_job(toy, ray_session, tmp_path):
    from raylc.evaluate import evaluate

    job = load_job(ROOT / "jobs" / "quickstart.yaml", {
        "probe": {"backend": "toy"}, "suite.problems_per_task": 6, "store.path": str(tmp_path),
        "fit.uncertainty": "none"})  # the point fit: the claim is the backend's, not the posterior's
    run = evaluate(job, log=lambda line: None)
    assert run.manifest.stages["report"].status == "done", run.manifest.stages
    done = pl.read_parquet(list((tmp_path / run.run_id / "infer").rglob("*.parquet")))
    spans = pl.read_parquet(tmp_path / run.run_id / "sample" / "spans.parquet")
    assert done.height == spans.height and done["error"].is_null().all()
    answered = done.filter(pl.col("completion") != "Unanswerable")
    assert answered.height and not (answered["completion"] == "?").any()


def test_a_stage_actor_closes_the_stage_it_built(toy, tmp_path):
    """The pipeline's stage actor closes its stage (and so the backend) when Ray Data lets it go
    (``__del__``)."""
    import gc

    from raylc.run.folder import RunFolder
    from raylc.run.pipeline import RequestFiles, StageActor

    log = tmp_path / "closed.log"
    job = parse_job({"name": "t", "probe": {"backend": "toy", "closed_log": str(log)}})
    (stage,) = backend_of(job.probe).stages(job, verbose=False)
    actor = StageActor(stage, job, RequestFiles(RunFolder(str(tmp_path), "r"), ()), first=True)
    assert log.read_text().split() == ["built", str(os.getpid())]
    del actor
    gc.collect()
    assert log.read_text().split() == ["built", str(os.getpid()), "closed", str(os.getpid())]


def test_a_backend_is_a_context_manager_that_closes_and_close_is_a_no_op_by_default(tmp_path):
    assert Backend().close() is None
    with ToyBackend({}, str(tmp_path / "closed.log")) as backend:
        assert isinstance(backend, ToyBackend)
    assert (tmp_path / "closed.log").read_text().split()[::2] == ["built", "closed"]


@pytest.mark.ray
def test_a_run_closes_every_backend_it_built(toy, ray_session, tmp_path):
    """Each text actor of the infer stage that served a batch closes its backend exactly once when
    Ray Data lets it go (``StageActor``: ``__ray_shutdown__`` -> ``__del__``). Ray Data starts its
    actors without waiting for them (``wait_for_min_actors_s`` -1), so on a busy machine one actor
    may still be starting when the run ends: Ray then ends it, and whether its backend got built
    and closed first depends on when. So a backend that never served is closed at most once or
    its process is gone. Ray Data does not wait for its actors to end either: the log is awaited
    (60 s at most, polled every 0.1 s)."""
    import time

    from raycluster import gone

    from raylc.evaluate import evaluate

    log = tmp_path / "closed.log"
    job = load_job(ROOT / "jobs" / "quickstart.yaml", {
        "probe": {"backend": "toy", "closed_log": str(log)}, "suite.problems_per_task": 2,
        "store.path": str(tmp_path / "runs"), "ray.actors": 2})
    evaluate(job, log=lambda line: None)

    def events() -> dict[str, list[int]]:
        out: dict[str, list[int]] = {"built": [], "served": [], "closed": []}
        for line in log.read_text().splitlines() if log.exists() else []:
            event, pid = line.split()
            out[event].append(int(pid))
        return out

    def settled(e: dict[str, list[int]]) -> bool:
        return set(e["served"]) <= set(e["closed"]) and all(
            pid in e["closed"] or gone(pid) for pid in e["built"])

    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline and not settled(events()):
        time.sleep(0.1)
    time.sleep(0.5)  # a second close of one backend would land about now
    e = events()
    assert e["served"] and len(set(e["served"])) == len(e["served"]) <= 2
    assert sorted(e["closed"]) == sorted(set(e["closed"])), "a backend closed twice"
    assert set(e["served"]) <= set(e["closed"]) <= set(e["built"])
    assert settled(e), e


def test_the_openai_plugins_endpoint_check_closes_the_backend_it_built(monkeypatch):
    from raylc.backends import openai_http

    closed = []
    monkeypatch.setattr(openai_http.OpenAIBackend, "check_endpoint", lambda self: None)
    monkeypatch.setattr(openai_http.OpenAIBackend, "close", lambda self: closed.append(self))
    job = parse_job({"name": "t", "probe": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}})
    backend_of(job.probe).check_endpoint(job)
    assert len(closed) == 1


# --- one registry: duplicates and checks ----------------------------------------------------------


def test_registering_a_backend_name_twice_is_refused(toy):
    class OtherToy(Toy):
        """Another plug-in for the same name."""

    with pytest.raises(ValueError, match=r"^backend 'toy' is registered already \(by tests\."):
        register_backend(OtherToy)
    register_backend(Toy)  # the same plug-in again (its module imported again): no error
    assert isinstance(backend_of(parse_job({"name": "t", "probe": {"backend": "toy"}}).probe), Toy)
    with pytest.raises(ValueError, match=r"^backend 'vllm' is registered already \(by raylc\.backends\.builtin\)$"):
        BACKENDS.register("vllm", lazy="somewhere.else")


def test_a_backend_entry_is_checked_when_it_is_registered():
    class NoStages(BackendPlugin):
        probe = ToyProbe

    class WrongName(Toy):
        pass

    with pytest.raises(TypeError, match="gives no pipeline stages"):
        register_backend(NoStages)
    with pytest.raises(TypeError, match=r"backend 'nope': a BackendPlugin whose probe config .* Literal\['nope'\]"):
        BACKENDS.register("nope", WrongName())
    with pytest.raises(TypeError, match="backend 'toy': a BackendPlugin"):
        BACKENDS.register("toy", object())  # type: ignore[arg-type]
    assert "toy" not in BACKENDS and "nope" not in BACKENDS


def test_the_built_in_backends_load_when_first_named():
    """Loading a job imports only the backends it names (raylc/backends/builtin.py holds the three)."""
    import subprocess
    import sys

    code = ("import sys, raylc.spec; print('raylc.backends.builtin' in sys.modules); "
            "raylc.spec.parse_job({'name': 'x', 'probe': {'backend': 'vllm', 'model': 'm'}}); "
            "print('raylc.backends.builtin' in sys.modules, 'raylc.backends.vllm_engine' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "True", "False"]


"""The backend registry (issue 30, acceptance 1): no branch on a backend's name outside
raylc/backends, and a backend registered from a test (this module only) parses and runs a job.

The toy backend is registered by the ``toy`` fixture and removed after its test, so that other
tests see the built-in backends only; a Ray worker, which imports this module to unpickle a
:class:`ToyProbe`, registers it on import."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Literal, Optional, Sequence

import polars as pl
import pytest

from raylc.backends.base import Backend, Generation, MaxTokens, Prompt, RawFlags, generation, prompt_text
from raylc.backends.registry import BACKENDS, BackendPlugin, backend_of, register_backend
from raylc.spec import PROBES, JobSpecError, ProbeConfig, load_job, parse_job

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
    closed_log: Optional[str] = None  #: a file ``close()`` appends a line to (the test of close)

    def model_name(self) -> str:
        return self.model


class ToyBackend(Backend):
    name = "toy"

    def __init__(self, answers: dict[str, str], closed_log: Optional[str] = None):
        self.answers, self.closed_log = answers, closed_log

    def close(self) -> None:
        if self.closed_log:
            with open(self.closed_log, "a", encoding="utf-8") as fh:
                fh.write("closed\n")

    def generate(self, prompts: Sequence[Prompt], max_tokens: MaxTokens = None,
                 raw: RawFlags = None) -> list[Generation]:
        out = []
        for p in map(prompt_text, prompts):
            vault = re.search(r"What is the code of vault (\S+)\?", p)
            seen = vault is not None and f"for vault {vault.group(1)}:" in p
            text = self.answers.get(vault.group(1), "?") if seen else "Unanswerable"  # type: ignore[union-attr]
            out.append(generation(text, prompt_tokens=len(p.split()), generated_tokens=1, latency_s=None))
        return out


class Toy(BackendPlugin):
    probe = ToyProbe

    def text_backend(self, job, table: Optional[pl.LazyFrame]) -> Backend:
        known = table.select("problem_id", "answer").collect() if table is not None else pl.DataFrame(
            schema={"problem_id": pl.String, "answer": pl.String})
        return ToyBackend(dict(zip(known["problem_id"].to_list(), known["answer"].to_list())), job.probe.closed_log)


def _in_ray_worker() -> bool:
    import ray

    return ray.is_initialized() and ray._private.worker.global_worker.mode == ray.WORKER_MODE


if _in_ray_worker():
    register_backend(Toy)


@pytest.fixture
def toy():
    register_backend(Toy)
    yield Toy
    BACKENDS.pop("toy", None)
    PROBES.pop("toy", None)


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


@pytest.mark.ray
def test_a_toy_backend_runs_a_quickstart_sized_job(toy, ray_session, tmp_path):
    from raylc.evaluate import evaluate

    job = load_job(ROOT / "jobs" / "quickstart.yaml", {
        "probe": {"backend": "toy"}, "suite.problems_per_task": 6, "store.path": str(tmp_path)})
    run = evaluate(job, log=lambda line: None)
    assert run.manifest["stages"]["report"]["status"] == "done", run.manifest["stages"]
    done = pl.read_parquet(list((tmp_path / run.run_id / "infer").rglob("*.parquet")))
    assert done.height and done["error"].is_null().all()
    answered = done.filter(pl.col("completion") != "Unanswerable")
    assert answered.height and not (answered["completion"] == "?").any()


def test_a_text_actor_closes_the_backend_it_built(toy, tmp_path):
    """The run layer's text actor closes its backend when Ray Data lets it go (``__del__``)."""
    import gc

    from raylc.run.ray_exec import RequestSource, TextEngineActor

    log = tmp_path / "closed.log"
    job = parse_job({"name": "t", "probe": {"backend": "toy", "closed_log": str(log)}})
    actor = TextEngineActor(job, RequestSource())
    assert not log.exists()
    del actor
    gc.collect()
    assert log.read_text().splitlines() == ["closed"]


def test_a_backend_is_a_context_manager_that_closes_and_close_is_a_no_op_by_default(tmp_path):
    assert Backend().close() is None
    with ToyBackend({}, str(tmp_path / "closed.log")) as backend:
        assert isinstance(backend, ToyBackend)
    assert (tmp_path / "closed.log").read_text() == "closed\n"


@pytest.mark.ray
def test_a_run_closes_every_backend_it_built(toy, ray_session, tmp_path):
    """Each text actor of the infer stage closed its backend by the time the run returns."""
    from raylc.evaluate import evaluate

    log = tmp_path / "closed.log"
    job = load_job(ROOT / "jobs" / "quickstart.yaml", {
        "probe": {"backend": "toy", "closed_log": str(log)}, "suite.problems_per_task": 2,
        "store.path": str(tmp_path / "runs"), "ray.actors": 2})
    evaluate(job, log=lambda line: None)
    assert log.read_text().splitlines() == ["closed", "closed"]


def test_the_openai_plugins_endpoint_check_closes_the_backend_it_built(monkeypatch):
    from raylc.backends import openai_http

    closed = []
    monkeypatch.setattr(openai_http.OpenAIBackend, "check_endpoint", lambda self: None)
    monkeypatch.setattr(openai_http.OpenAIBackend, "close", lambda self: closed.append(self))
    job = parse_job({"name": "t", "probe": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}})
    backend_of(job.probe).check_endpoint(job)
    assert len(closed) == 1

"""An actor no node can hold is refused before the stream starts (Ray Data would wait for it
without a limit): an error on a local Ray, a warning on a cluster that may still grow."""

from __future__ import annotations

import pytest
import ray

from raylc.backends.stages import PipelineStage
from raylc.run.pipeline import check_placeable
from raylc.spec import Job

NODES = [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}},
         {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0, "accelerator_type:A10G": 1.0}}]


def _stage(num_cpus=0.5, **options) -> PipelineStage:
    return PipelineStage("engine", fn=lambda job, inputs: None, num_cpus=num_cpus, options=options,
                         label="vLLM engine")


@pytest.fixture(autouse=True)
def _nodes(monkeypatch):
    monkeypatch.setattr(ray, "nodes", lambda: NODES)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.mark.parametrize("stage", [_stage(2.0), _stage(8.0, num_gpus=1), _stage(1.0, num_gpus=1,
                                                                                  accelerator_type="A10G")])
def test_an_actor_one_alive_node_holds_passes(stage):
    lines = []
    check_placeable([stage], Job(name="j"), lines.append)
    assert lines == []


CPUS, GPUS, ACCELERATOR = "raise ray.num_cpus", "probe.device: cpu", "remove probe.accelerator_type"


@pytest.mark.parametrize("stage, message, remedy", [
    (_stage(8.5), "each vLLM engine actor needs CPU 8.5 on one node; the Ray cluster's largest node has CPU 8", CPUS),
    (_stage(1.0, num_gpus=2), "needs CPU 1, GPU 2 on one node; the Ray cluster's largest node has CPU 8, GPU 1", GPUS),
    (_stage(1.0, num_gpus=1, accelerator_type="H100"), "accelerator_type:H100 0.001 on one node", ACCELERATOR),
    (_stage(16.0, num_gpus=4), "the Ray cluster's largest node has CPU 8, GPU 1", GPUS),  # only a dead node holds it
])
def test_an_actor_no_alive_node_holds_fails_on_a_local_ray_and_warns_on_a_cluster(stage, message, remedy):
    """The error names what to change for the resource that is short (GPUs before the rest)."""
    with pytest.raises(RuntimeError) as exc:
        check_placeable([_stage(), stage], Job(name="j"), print)
    assert "this local Ray instance cannot grow" in str(exc.value)
    assert message in str(exc.value) and remedy in str(exc.value), exc.value
    assert not [other for other in {CPUS, GPUS, ACCELERATOR} - {remedy} if other in str(exc.value)]
    lines = []
    check_placeable([stage], Job(name="j", ray={"address": "ray://head:10001"}), lines.append)
    assert len(lines) == 1 and lines[0].startswith("warning: each vLLM engine actor needs ")
    assert lines[0].endswith("Ray waits until the cluster adds a node that fits")


def test_without_a_ray_session_there_is_nothing_to_check(monkeypatch):
    """A stream run in process (no Ray started) has no nodes to ask; ray.nodes() would raise."""
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "nodes", lambda: pytest.fail("asked a cluster that is not there"))
    check_placeable([_stage(1e3)], Job(name="j"), print)

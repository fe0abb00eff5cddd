import os
import secrets
from pathlib import Path

import pytest
from hypothesis import settings
from raycluster import free_port

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

# Hypothesis's deadline per example (200 ms by default) measures the machine, not the code: the
# fast suite runs beside the Ray tests on 2 cores, where one example of a string test once took
# 288 ms. No test here is about speed (the benchmarks under tests/benchmarks/ are).
settings.register_profile("raylc", deadline=None)
settings.load_profile("raylc")

# Every Ray this test session starts (the shared instance, clusters, `raylc run` subprocesses)
# keeps its session folder under a root of its own, so that the guard below sees only them
# (another test run on the same machine uses another root). Short: Ray's socket paths live there.
# Under pytest-xdist each worker is a test session of its own, with its own root.
RAY_ROOT = Path(os.environ.setdefault("RAY_TMPDIR", f"/tmp/rt-{secrets.token_hex(4)}"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    RAY_ROOT = Path(f"{os.environ.pop('RAY_TMPDIR')}-{os.environ['PYTEST_XDIST_WORKER']}")
    os.environ["RAY_TMPDIR"] = str(RAY_ROOT)

DOUBLES = str(Path(__file__).resolve().parent / "doubles")
# tests/real needs vLLM's CPU build and a real model: `make test-real` (RAYLC_REAL=1) runs it
collect_ignore_glob = [] if os.environ.get("RAYLC_REAL") == "1" else ["real/*"]


# S3 for the whole session is a moto server on 127.0.0.1 (started by the tests that use it):
# set before Ray starts so that its workers, which read request tables from the store, see the
# same endpoint and credentials; nothing ever reaches an address outside 127.0.0.0/8.
S3_PORT = free_port()
S3_CREDS = {"AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(),
            "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30)}
os.environ.update({
    "AWS_ENDPOINT_URL": f"http://127.0.0.1:{S3_PORT}", "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true", **S3_CREDS,
})
for _var in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
    os.environ.pop(_var, None)


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance for the whole test session (ray.init takes ~10 s). Its workers
    can import the timed vLLM double (tests/doubles) as ``vllm``, and it declares one GPU so
    that an engine actor can be placed (the double needs none); this process cannot import
    the double unless a test puts it on sys.path."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, logging_level="ERROR",
                 runtime_env={"env_vars": {"PYTHONPATH": DOUBLES}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def ray_address(ray_session) -> str:
    """The GCS address of :func:`ray_session`'s Ray: a subprocess driver given it as RAY_ADDRESS
    joins that Ray (as a job on a cluster does) instead of starting one of its own."""
    return ray_session.get_runtime_context().gcs_address


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` repeat an acceptance check at full scale (for example a default
    60 s time limit); CI runs their bounded variants, and ``RAYLC_SLOW=1`` runs them too."""
    if os.environ.get("RAYLC_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: full-scale variant of a bounded test; RAYLC_SLOW=1 runs it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _ray_sessions() -> set[str]:
    return {p.name for p in (RAY_ROOT / "ray").glob("session_2*")} if (RAY_ROOT / "ray").exists() else set()


@pytest.fixture(autouse=True)
def _ray_marker_guard(request):
    """A test that starts Ray (in this process, in a subprocess, or through the shared
    ``ray_session``) must carry the ``ray`` marker, so that ``pytest -m "not ray"`` is the fast
    suite: an unmarked test that does fails here, naming itself."""
    if request.node.get_closest_marker("ray") is not None:
        yield
        return
    started = {"ray_session", "head", "agentless"} & set(request.fixturenames)  # the shared instance; `ray start` heads
    if started:
        pytest.fail(f"{request.node.nodeid} uses {started.pop()} but is not marked @pytest.mark.ray")
    before = _ray_sessions()
    yield
    if _ray_sessions() - before:
        pytest.fail(f"{request.node.nodeid} started Ray but is not marked @pytest.mark.ray")

"""`raylc submit` and plain `ray job submit --working-dir` against a local Ray head on 127.0.0.1,
and the wait for a job agent that is still starting (a fake Jobs API, and real heads)."""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest
import yaml
from cli_runner import raylc
from doubles.jobs_api import JOB_ID, NO_AGENT, FakeJobsAPI
from hypothesis import given
from hypothesis import strategies as st
from raycluster import LocalHead

from raylc.run.submit import AGENT_NOT_READY, AGENT_PAUSES_S, SubmitError, submit, when_agent_ready

ROOT = Path(__file__).resolve().parents[2]
COMPARED = ["build/problems.parquet", "score/observations.parquet", "fits/problems.parquet", "report/recovery.parquet"]


@pytest.fixture
def small_job():
    """A smaller quickstart inside the working directory that `ray job submit` uploads (at its
    top, where no test looks for job files: the shipped ones in jobs/ are read beside this)."""
    spec = yaml.safe_load((ROOT / "jobs" / "quickstart.yaml").read_text())
    spec["suite"].update(problems_per_task=8, max_units=150)
    spec["fit"]["uncertainty"] = "none"  # the point fit: the submission paths are compared, not the posterior
    path = ROOT / ".submit-test.yaml"
    path.write_text(yaml.safe_dump(spec))
    yield path.relative_to(ROOT).as_posix()
    path.unlink()


TINY = "name: tiny\nsuite: {kind: planted, tasks: [planted-a], problems_per_task: 2, min_units: 20, max_units: 40}\n"


def _tiny_job(folder: Path, extra: str = "") -> Path:
    """A tiny job alone in ``folder``, the working directory the submission uploads."""
    folder.mkdir(exist_ok=True)
    (folder / "job.yaml").write_text(TINY + extra)
    return folder / "job.yaml"


@pytest.fixture(scope="module")
def agentless(tmp_path_factory):
    """A real head whose job agent never comes (its HTTP port is taken), and, in a thread as
    soon as its dashboard answers, a ``raylc submit`` to it with ``ray.connect_timeout_s`` 15 s
    (the head itself waits 10 s before each answer). Yields the head and the future of the
    submission's completed process (:func:`test_submit_gives_up_on_a_real_head_without_a_job_agent`,
    the full-scale check); the head is stopped when the module ends."""
    cluster = LocalHead(tmp_path_factory.mktemp("h") / "ray", agent_port_taken=True)
    job = _tiny_job(tmp_path_factory.mktemp("wd"), "ray: {connect_timeout_s: 15}\n")

    def give_up() -> subprocess.CompletedProcess:
        cluster.wait_dashboard()
        return subprocess.run([sys.executable, "-m", "raylc", "submit", "job.yaml", "--address", cluster.address],
                              cwd=job.parent, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(1) as pool:
        try:
            yield cluster, pool.submit(give_up)
        finally:
            cluster.stop()


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A new head, shared by the module. As soon as its
    dashboard answers (its job agent may still be starting), a tiny job is submitted:
    ``cluster.early`` holds that ``raylc submit`` and its store
    (:func:`test_submit_right_after_the_head_starts`)."""
    cluster = LocalHead(tmp_path_factory.mktemp("h") / "ray")  # short: Ray's socket paths live there
    try:
        cluster.wait_dashboard()
        # an agent may take minutes to register on a busy machine: the wait, not its default limit, is tested
        job, store = _tiny_job(tmp_path_factory.mktemp("wd"), "ray: {connect_timeout_s: 300}\n"), \
            tmp_path_factory.mktemp("early-store")
        cluster.early = (subprocess.run(
            [sys.executable, "-m", "raylc", "submit", "job.yaml", "--address", cluster.address, "--store", str(store),
             "--run-id", "early"], cwd=job.parent, capture_output=True, text=True, timeout=900), store)
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()


def _check_run(store: Path, run_id: str) -> None:
    manifest = (store / run_id / "manifest.json").read_text()
    assert '"status": "done"' in manifest and '"report"' in manifest
    recovery = pl.read_parquet(store / run_id / "report" / "recovery.parquet")
    assert recovery.filter(pl.col("task") == "(all)")["recovery"][0] >= 0.8


@pytest.mark.ray
def test_raylc_submit_and_plain_ray_job_submit(head, tmp_path, small_job):
    """The same job through `raylc submit` and through plain `ray job submit`, both submitted at
    once (each job needs half a CPU of the head's two; their start-ups and log follows overlap)."""
    store = tmp_path / "store"
    ray_bin = Path(sys.executable).parent / "ray"
    cmds = {"via-raylc": [sys.executable, "-m", "raylc", "submit", small_job, "--address", head.address,
                          "--store", str(store), "--run-id", "via-raylc"],
            "via-ray": [str(ray_bin), "job", "submit", "--address", head.address, "--working-dir", ".", "--",
                        "python", "-m", "raylc", "run", small_job, "--store", str(store), "--run-id", "via-ray"]}
    procs = {}
    try:
        for name, cmd in cmds.items():  # the console to files: neither waits on a full pipe
            with open(tmp_path / f"{name}.out", "w") as out, open(tmp_path / f"{name}.err", "w") as err:
                procs[name] = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=err, text=True)
        codes = {name: p.wait(timeout=900) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    out, err, plain_err = ((tmp_path / f).read_text() for f in ("via-raylc.out", "via-raylc.err", "via-ray.err"))
    assert codes["via-raylc"] == 0, err[-3000:]
    assert out.strip().splitlines()[-1].endswith("SUCCEEDED")
    assert "[report]" in out  # the job's logs were followed
    _check_run(store, "via-raylc")
    assert codes["via-ray"] == 0, plain_err[-3000:]
    _check_run(store, "via-ray")
    for rel in COMPARED:
        assert pl.read_parquet(store / "via-raylc" / rel).equals(pl.read_parquet(store / "via-ray" / rel)), rel


def test_submit_unreachable_cluster_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "raylc", "submit", "jobs/quickstart.yaml", "--address", "http://127.0.0.1:9"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: http://127.0.0.1:9: could not submit")
    assert "Traceback" not in proc.stderr


def test_submit_bad_job_file_fails_locally(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsampling: {stride: 2}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "raylc", "submit", str(bad), "--address", "http://127.0.0.1:9"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2
    assert "unknown key 'sampling.stride'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.ray
def test_ray_job_stop_interrupts_the_run(head, tmp_path):
    """`ray job stop` sends SIGTERM to the driver (then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S,
    3 s): the run ends in time with its one line in the job's log, the stage marked
    interrupted and the lock released."""
    import json
    import re
    import time

    from ray.job_submission import JobSubmissionClient

    job = ROOT / ".stop-test.yaml"  # uploaded, outside jobs/ (see small_job)
    job.write_text("name: stop\nsuite: {kind: planted, tasks: [planted-a, planted-b], problems_per_task: 3, "
                   "min_units: 200, max_units: 400}\ninference: {shard_rows: 500, shard_seconds: 0.5}\n")
    store = tmp_path / "store"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "raylc", "submit", job.relative_to(ROOT).as_posix(), "--address", head.address,
             "--store", str(store), "--run-id", "stop", "--no-wait"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )
    finally:
        job.unlink()
    assert proc.returncode == 0, proc.stderr[-3000:]
    job_id = proc.stdout.split()[-2]
    run = store / "stop"
    client = JobSubmissionClient(head.address)
    deadline, polls = time.monotonic() + 600, 0
    while time.monotonic() < deadline:
        try:
            running = (json.loads((run / "manifest.json").read_text())["stages"].get("infer", {}).get("status")
                       == "running")
        except (OSError, ValueError, KeyError):
            running = False
        if running and any((run / "infer").rglob("part-*.parquet")):
            break
        polls += 1
        if polls % 50 == 0 and str(client.get_job_status(job_id)).split(".")[-1] in ("STOPPED", "SUCCEEDED", "FAILED"):
            pytest.fail(f"the submitted run ended before it stored an inference shard: {client.get_job_logs(job_id)}")
        time.sleep(0.1)
    else:
        pytest.fail("the submitted run never stored an inference shard within 600 s")
    client.stop_job(job_id)
    while str(client.get_job_status(job_id)).split(".")[-1] not in ("STOPPED", "SUCCEEDED", "FAILED"):
        time.sleep(0.5)
    time.sleep(1.0)  # the log's last lines
    logs = client.get_job_logs(job_id)
    assert re.search(r"^interrupted \(SIGTERM\) during infer; \d+ requests stored; "
                     r"re-run with --run-id stop to resume$",
                     logs, re.M), logs[-3000:]
    assert "Traceback" not in logs and "SIGTERM received" not in logs
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stages"]["infer"]["status"] == "interrupted"
    assert not (run / "_lock.json").exists()


def test_the_entrypoint_passes_every_set_on_quoted():
    from raylc.run.submit import build_entrypoint

    got = build_entrypoint("jobs/q.yaml", "s3://b/runs", "r1", ["seed=3", "name=my run", "suite.lengths=[1, 2]"])
    assert got == ("python -m raylc run jobs/q.yaml --store s3://b/runs --run-id r1 --set seed=3 "
                   "--set 'name=my run' --set 'suite.lengths=[1, 2]'")
    assert build_entrypoint("jobs/q.yaml", None, None) == "python -m raylc run jobs/q.yaml"


# --------------------------------------------------------------------------------------------- #
# a cluster whose job agent is still starting
# --------------------------------------------------------------------------------------------- #


def _waiting(address: str, limit: str) -> str:
    return (f"waiting for the cluster's job agent at {address}: {NO_AGENT!r} "
            f"(retrying for up to {limit} s, ray.connect_timeout_s)")


class FakeTime:
    """A clock that only the test's sends and the retry's pauses move."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


quarters = st.integers(1, 400).map(lambda q: q / 4)  # exact in binary: the clock's sums compare exactly


@given(refusals=st.integers(0, 15), limit=quarters, cost=st.integers(0, 48).map(lambda q: q / 4))
def test_the_wait_for_the_agent_keeps_to_its_limit(refusals, limit, cost):
    """Refused ``refusals`` times (each answer taking ``cost`` s): the submission is retried
    after pauses that double from 0.5 s to 5 s, never past the limit counted from the first
    refusal; it gives up exactly when a refusal comes at or after that limit, says once what it
    waits for, and is never retried after it is accepted."""
    clock, sent, notices = FakeTime(), [], []

    def send() -> str:
        clock.now += cost
        sent.append(clock.now)
        if len(sent) <= refusals:
            raise RuntimeError(f"Request failed with status code 500: {NO_AGENT}.")
        return JOB_ID

    try:
        outcome = when_agent_ready(send, "http://h:8265", limit, notices.append, clock.sleep, lambda: clock.now)
    except SubmitError as exc:
        outcome = exc
    first, refused = (sent[0] if sent else 0.0), sent[:refusals]
    late = [t for t in refused[1:] if t - first >= limit]
    if late:
        assert isinstance(outcome, SubmitError) and sent[-1] == late[0]
        assert str(outcome) == (f"http://h:8265: the cluster's job agent was not up within {limit:g} s "
                                f"({NO_AGENT!r}); a cluster that is still starting may need longer: "
                                f"--set ray.connect_timeout_s=SECONDS")
        assert sent[-1] - first <= limit + cost  # the limit, and the last answer's own time
    else:
        assert outcome == JOB_ID and len(sent) == refusals + 1
    pauses = [min(AGENT_PAUSES_S[1], AGENT_PAUSES_S[0] * 2 ** i) for i in range(len(clock.sleeps))]
    assert clock.sleeps == [min(p, first + limit - t) for p, t in zip(pauses, sent)]
    assert notices == ([_waiting("http://h:8265", f"{limit:g}")] if refusals else [])


def test_other_submission_errors_are_not_retried():
    def send():
        raise RuntimeError("Request failed with status code 500: Failed to submit job due to unexpected exception.")

    notices: list[str] = []
    with pytest.raises(RuntimeError, match="unexpected exception"):
        when_agent_ready(send, "http://h:8265", 60, notices.append, sleep=lambda s: pytest.fail("retried"))
    assert notices == []


def test_a_dropped_connection_is_retried_only_while_waiting_for_the_agent():
    """A head under load may close a connection while its agent starts: once a refusal has
    started the wait, a dropped connection is retried like a refusal; before it, it is an error."""
    dropped = ConnectionError("('Connection aborted.', RemoteDisconnected('Remote end closed connection "
                              "without response'))")
    answers = [RuntimeError(f"Request failed with status code 500: {NO_AGENT}."), dropped, JOB_ID]
    clock, notices = FakeTime(), []

    def send():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert when_agent_ready(send, "http://h:8265", 60, notices.append, clock.sleep, lambda: clock.now) == JOB_ID
    assert clock.sleeps == [0.5, 1.0] and notices == [_waiting("http://h:8265", "60")]

    def first_dropped():
        raise dropped

    with pytest.raises(ConnectionError):
        when_agent_ready(first_dropped, "http://h:8265", 60, notices.append, sleep=lambda s: pytest.fail("retried"))


def test_submit_waits_for_the_agent_of_a_fake_head(tmp_path):
    """Ray's client against a Jobs API that refuses three submissions as a starting head does:
    the fourth is accepted, after pauses of 0.5, 1 and 2 s (here not slept)."""
    api = FakeJobsAPI("starting", refusals=3)
    notices: list[str] = []
    pauses: list[float] = []
    try:
        job = _tiny_job(tmp_path / "wd")
        got = submit(job, api.address, wait=False, working_dir=job.parent, log=lambda m: None,
                     notice=notices.append, sleep=pauses.append)
    finally:
        api.close()
    assert got == (JOB_ID, "PENDING")
    assert api.posts == 4 and pauses == [0.5, 1.0, 2.0]
    assert notices == [_waiting(api.address, "60")]


def test_submit_to_a_head_that_keeps_refusing_ends_after_its_limit(tmp_path):
    """`ray.connect_timeout_s` 4 s, every submission refused: the waiting line, then one line
    and exit 1 (a cluster that did not answer), no traceback. The limit leaves room for each
    request of a loaded machine (it bounds each one too: at 0.3 s a busy CI machine's first
    answer came too late); the pauses' exact schedule is `test_the_wait_for_the_agent_keeps_to_its_limit`'s."""
    api = FakeJobsAPI("starting", refusals=None)
    try:
        job = _tiny_job(tmp_path / "wd", "ray: {connect_timeout_s: 4}\n")
        proc = raylc("submit", "job.yaml", "--address", api.address, "--working-dir", job.parent, cwd=job.parent)
    finally:
        api.close()
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert _waiting(api.address, "4") in lines
    assert lines[-1] == (f"error: {api.address}: the cluster's job agent was not up within 4 s ({NO_AGENT!r}); "
                         f"a cluster that is still starting may need longer: --set ray.connect_timeout_s=SECONDS")
    assert 2 <= api.posts <= 5  # at 0, 0.5, 1.5, 3.5 and 4 s at most (the last pause cut to the limit)


def test_cli_submit_waits_for_the_agent_and_follows_the_job(tmp_path):
    """The command line: refused once (one pause of 0.5 s), accepted, followed to SUCCEEDED; the
    waiting line goes to standard error, the job's lines to standard output."""
    api = FakeJobsAPI("starting", refusals=1)
    try:
        job = _tiny_job(tmp_path / "wd")
        proc = raylc("submit", "job.yaml", "--address", api.address, "--working-dir", job.parent, cwd=job.parent)
    finally:
        api.close()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"submitted {JOB_ID}", f"{JOB_ID} SUCCEEDED"]
    assert [line for line in proc.stderr.splitlines() if "waiting" in line] == [_waiting(api.address, "60")]
    assert api.posts == 2


@pytest.mark.ray
def test_submit_right_after_the_head_starts(head):
    """A job submitted as soon as a new head's dashboard answers, before its job agent is
    registered, is taken and runs to the end: raylc submit waits for the agent (the module's
    head, submitted to by its fixture before any test ran on it)."""
    proc, store = head.early
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].endswith("SUCCEEDED")
    assert '"status": "done"' in (store / "early" / "manifest.json").read_text()


def test_the_fake_jobs_api_answers_in_rays_own_words():
    """The double's answer while no job agent is registered is the installed Ray's
    (ray/dashboard/modules/job/job_head.py, read as text: nothing of Ray is imported), and raylc
    recognises it (:data:`raylc.run.submit.AGENT_NOT_READY`)."""
    import importlib.util

    ray_dir = Path(importlib.util.find_spec("ray").submodule_search_locations[0])
    assert f'"{NO_AGENT}"' in (ray_dir / "dashboard" / "modules" / "job" / "job_head.py").read_text()
    assert NO_AGENT.startswith(AGENT_NOT_READY)


@pytest.mark.ray
# a second head on the 2-core CI machine; the fake Jobs API tests above (in Ray's own words) run in
# CI, and RAYLC_SLOW=1 runs this against a real head
@pytest.mark.slow
def test_submit_gives_up_on_a_real_head_without_a_job_agent(agentless):
    """A real head whose job agent never comes answers as a starting one does; raylc recognises
    Ray's own words, waits `ray.connect_timeout_s` (15 s: the head itself waits 10 s before it
    answers) and ends with one line (the submission of :func:`agentless`, made while the module's
    other tests ran; the head is still up here)."""
    cluster, submission = agentless
    proc = submission.result(timeout=600)
    assert not cluster.agent_registered()
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert _waiting(cluster.address, "15") in lines, proc.stderr[-3000:]
    assert lines[-1].startswith(f"error: {cluster.address}: the cluster's job agent was not up within 15 s ")
    assert "Traceback" not in proc.stderr

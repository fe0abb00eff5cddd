"""Time limits on remote waits (issue 14, item 2): joining a Ray cluster (`ray.init` with an
address, RAY_ADDRESS: the address check, then the join) and the Jobs API client of `raylc submit` fail within
`ray.connect_timeout_s` (60 s by default) with one line naming the address.

Every server here is started by the test on 127.0.0.1: a closed port, a port that accepts
connections and never replies, one that answers an HTTP/2 preface and then nothing, and a fake
Jobs API that stops answering part way."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from doubles.jobs_api import FakeJobsAPI
from raycluster import free_port

RAYLC = [sys.executable, "-m", "raylc"]
SMALL = "name: small\nsuite: {kind: planted, tasks: [planted-a], problems_per_task: 2, min_units: 20, max_units: 40}\n"
_PROXIES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and k not in _PROXIES}
    return {**env, "NO_PROXY": "127.0.0.1,localhost", **extra}


class SilentPort:
    """A socket on 127.0.0.1 that accepts connections and never replies."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        #: time.monotonic() of the first connection (a client's limit runs from its first contact)
        self.first_contact: float | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn = self.sock.accept()[0]
            except OSError:
                return
            if self.first_contact is None:
                self.first_contact = time.monotonic()
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        """What the port does with a connection: here, nothing."""

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


class MuteAfterHello(SilentPort):
    """A socket on 127.0.0.1 that answers an HTTP/2 client's preface with a SETTINGS frame (as
    any gRPC server does, so the address check passes) and then never says anything else."""

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.recv(4096)
            conn.sendall(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # an empty SETTINGS frame
            while conn.recv(4096):
                pass
        except OSError:
            return


class TricklingPort(SilentPort):
    """A socket on 127.0.0.1 that answers every connection one byte every ``every_s`` seconds,
    forever (an HTTP status line, then headers that never end): each read is quick, the reply
    never complete."""

    def __init__(self, every_s: float = 0.05) -> None:
        self.every_s = every_s
        super().__init__()

    def _serve(self, conn: socket.socket) -> None:
        data = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10**6
        for i in range(len(data)):
            try:
                conn.sendall(data[i:i + 1])
            except OSError:
                return
            time.sleep(self.every_s)


def test_a_server_that_trickles_bytes_is_given_up_in_twice_the_read_limit():
    """Each read of a trickling server is quick, so a per-read timeout never trips; the dashboard
    check of `raylc submit` and the endpoint check of an OpenAI probe bound the whole call
    (`raylc/io/deadline.py`): they fail in one line within twice their limit."""
    from raylc.backends.base import BackendUnavailable
    from raylc.backends.config import OpenAIProbe
    from raylc.backends.openai_http import OpenAIBackend
    from raylc.run.submit import SubmitError, check_dashboard

    port = TricklingPort()
    try:
        start = time.monotonic()
        with pytest.raises(SubmitError, match=r"^127\.0\.0\.1:\d+: did not answer within 1 s to GET /api/version"):
            check_dashboard(f"127.0.0.1:{port.port}", 1.0)
        assert time.monotonic() - start < 10, "the check waited past its limit"
        url = f"http://127.0.0.1:{port.port}/v1"
        backend = OpenAIBackend(OpenAIProbe(backend="openai", base_url=url, model="m", timeout_s=1.0))
        start = time.monotonic()
        with pytest.raises(BackendUnavailable, match=r"is unavailable: no complete answer within 2 s"):
            backend.check_endpoint()
        assert time.monotonic() - start < 10, "the check waited past its limit"
        backend.close()
    finally:
        port.close()


@pytest.fixture
def silent():
    port = SilentPort()
    yield port
    port.close()


def _job(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(SMALL + extra)
    return path


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


class Launched:
    """A process started at once in a thread of its own; :meth:`result` waits for it and gives
    (seconds from its start to its end, the completed process); :attr:`end` is when it ended
    (``time.monotonic()``), to time a limit from the process's first contact with a server
    rather than from its start, which a loaded machine stretches to tens of seconds."""

    def __init__(self, args: list[str], **kwargs) -> None:
        self._out: dict = {}
        self._thread = threading.Thread(target=self._run, args=(args,), kwargs=kwargs, daemon=True)
        self._thread.start()

    def _run(self, args: list[str], **kwargs) -> None:
        t0 = time.monotonic()
        try:
            self._out["proc"] = subprocess.run(args, capture_output=True, text=True, timeout=400, **kwargs)
        except BaseException as exc:  # re-raised in the test that reads the result
            self._out["error"] = exc
        self.end = time.monotonic()
        self._out["took"] = self.end - t0

    def wait(self) -> None:
        self._thread.join(450)

    def result(self) -> tuple[float, subprocess.CompletedProcess]:
        self.wait()
        if "error" in self._out:
            raise self._out["error"]
        return self._out["took"], self._out["proc"]


def _submit(wd: Path, address: str, timeout_s: float) -> Launched:
    """`raylc submit` of a small job in its own working directory (a tiny upload)."""
    wd.mkdir()
    (wd / "job.yaml").write_text(SMALL + f"ray: {{connect_timeout_s: {timeout_s}}}\n")
    return Launched([*RAYLC, "submit", "job.yaml", "--address", address, "--working-dir", str(wd)], cwd=wd, env=_env())


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    """The module's one-process scenarios, all started at once: each mostly waits (a time limit,
    a refused connection's grace), so together they take about as long as the longest alone.
    name -> (Launched, what its test needs to know)."""
    silent = {name: SilentPort() for name in ("environment", "job file", "submit")}  # one each: its first contact
    hang, status, mute, mute_gcs = FakeJobsAPI("hang"), FakeJobsAPI("status"), MuteAfterHello(), MuteAfterHello()
    root = tmp_path_factory.mktemp("timeouts")
    runs: dict[str, tuple[Launched, dict]] = {}

    def run(name: str, extra: str, ctx: dict, **env: str) -> None:
        (root / name).mkdir()
        store = root / name / "store"
        launched = Launched([*RAYLC, "run", str(_job(root / name, extra)), "--store", str(store)], env=_env(**env))
        runs[name] = (launched, {"store": store, **ctx})

    closed = free_port()
    # a refused connection fails at once, not at the limit (600 s, so that start-up cannot reach it)
    run("stale", "ray: {connect_timeout_s: 600}\n", {"port": closed}, RAY_ADDRESS=f"127.0.0.1:{closed}")
    address = f"127.0.0.1:{silent['environment'].port}"
    run("silent-environment", "ray: {connect_timeout_s: 2}\n", {"address": address, "server": silent["environment"]},
        RAY_ADDRESS=address)
    # ray.address wins over RAY_ADDRESS
    address = f"127.0.0.1:{silent['job file'].port}"
    run("silent-job file", f"ray: {{connect_timeout_s: 2, address: '{address}'}}\n",
        {"address": address, "server": silent["job file"]}, RAY_ADDRESS=f"127.0.0.1:{free_port()}")
    client = f"ray://127.0.0.1:{mute.port}"
    run("mute-client", "ray: {connect_timeout_s: 5}\n", {"address": client, "server": mute}, RAY_ADDRESS=client)
    address = f"127.0.0.1:{mute_gcs.port}"
    run("mute-gcs", "ray: {connect_timeout_s: 5}\n", {"address": address, "server": mute_gcs}, RAY_ADDRESS=address)
    address = f"http://127.0.0.1:{silent['submit'].port}"
    runs["submit-silent"] = (_submit(root / "submit-silent", address, 2), {"address": address,
                                                                            "server": silent["submit"]})
    runs["submit-hang"] = (_submit(root / "submit-hang", hang.address, 2), {"address": hang.address, "api": hang})
    runs["submit-status"] = (_submit(root / "submit-status", status.address, 2),
                             {"address": status.address, "api": status})
    try:
        yield runs
    finally:
        for launched, _ in runs.values():
            launched.wait()
        for port in silent.values():
            port.close()
        mute.close()
        mute_gcs.close()
        hang.close()
        status.close()


def _since_contact(launched: Launched, contact: float | None) -> float:
    """Seconds from the process's first contact with its server to its end (its limit's clock)."""
    assert contact is not None, "the process never reached its server"
    return launched.end - contact


def test_stale_ray_address_closed_port_fails_fast(scenarios):
    """RAY_ADDRESS naming a dead cluster (closed port), a 600 s limit: one line, exit 1, before
    anything is written (it used to write build and sample, then print GCS warnings forever)."""
    launched, ctx = scenarios["stale"]
    took, proc = launched.result()
    assert proc.returncode == 1
    assert _one_line(proc) == (f"error: RAY_ADDRESS=127.0.0.1:{ctx['port']} (from the environment) refused the "
                               "connection "
                               f"(no Ray cluster there); unset RAY_ADDRESS to start a local Ray")
    assert took < 300, took  # refused at once, not at the 600 s limit (start-up alone: 31-45 s under load)
    assert not ctx["store"].exists()


@pytest.mark.parametrize("where", ["environment", "job file"])
def test_silent_cluster_fails_within_the_job_files_limit(scenarios, where):
    launched, ctx = scenarios[f"silent-{where}"]
    address = ctx["address"]
    if where == "environment":
        expected = (f"error: RAY_ADDRESS={address} (from the environment) did not answer within 2 s (no reply); "
                    f"unset RAY_ADDRESS to start a local Ray")
    else:
        expected = (f"error: ray.address {address} (from the job file) did not answer within 2 s (no reply); "
                    f"fix ray.address, or remove it to start a local Ray")
    _, proc = launched.result()
    assert proc.returncode == 1
    assert _one_line(proc) == expected
    assert 1.0 <= _since_contact(launched, ctx["server"].first_contact) < 45  # the 2 s limit, not the 60 s default
    assert not ctx["store"].exists()


@pytest.mark.parametrize("scenario, said", [
    ("mute-client", "this driver had not joined it within 5 s"),
    ("mute-gcs", "its GCS did not reply within 5 s"),
])
def test_a_cluster_that_answers_the_check_then_nothing_is_given_up_within_the_limit(scenarios, scenario, said):
    """An address whose server answers the HTTP/2 preface and then never replies, at
    ray.connect_timeout_s, in one line, with nothing written. A Ray Client address (`ray://`):
    `ray.init`'s ClusterInfo call has no limit of its own. A GCS address: Ray's C++ client
    waits about 40 s for the cluster id before Python could stop it, so the check asks for the
    id itself within the limit."""
    launched, ctx = scenarios[scenario]
    _, proc = launched.result()
    assert proc.returncode == 1
    assert _one_line(proc) == (f"error: RAY_ADDRESS={ctx['address']} (from the environment) answered, but {said} "
                               "(ray.connect_timeout_s); unset RAY_ADDRESS to start a local Ray")
    # the check passed, the join cut at 5 s (a GCS held Ray's client for about 40 s before)
    assert 4.0 <= _since_contact(launched, ctx["server"].first_contact) < 30
    assert not ctx["store"].exists()


_IN_A_THREAD = """
import sys, threading, time
from raylc.run.session import RayUnavailable, init_ray
said = {}
def join():
    t0 = time.monotonic()
    try:
        init_ray(sys.argv[1], timeout_s=3)
        said["line"] = "joined"
    except RayUnavailable as exc:
        said["line"] = f"{time.monotonic() - t0:.2f} {exc}"
caller = threading.Thread(target=join)
caller.start()
caller.join(90)
print(said.get("line", "still waiting"), flush=True)
"""


def test_a_join_from_a_thread_that_is_not_main_is_given_up_within_the_limit():
    """``ray.init`` called from a caller's own thread (an application that runs
    :func:`raylc.evaluate.evaluate` off its main thread), joining a Ray Client server that answers
    the check and then nothing: given up at ``ray.connect_timeout_s`` as in the main thread,
    where SIGALRM cannot reach (it used to wait without a limit)."""
    mute = MuteAfterHello()
    try:
        proc = subprocess.run([sys.executable, "-c", _IN_A_THREAD, f"ray://127.0.0.1:{mute.port}"],
                              capture_output=True, text=True, timeout=150, env=_env())
    finally:
        mute.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    took, line = proc.stdout.strip().split(" ", 1)
    assert line == (f"Ray address ray://127.0.0.1:{mute.port} answered, but this driver had not joined it within "
                    "3 s (ray.connect_timeout_s); check the address"), proc.stdout
    assert 3.0 <= float(took) < 30


@contextlib.contextmanager
def _grpc_server(*handlers):
    """A gRPC server on 127.0.0.1 with ``handlers``; yields its port."""
    from concurrent import futures

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(1), handlers=handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(None)


def test_a_grpc_server_that_is_not_a_gcs_is_named_as_such():
    """A gRPC server without Ray's GCS service answers the preface as a GCS does; asking it for
    the cluster id tells them apart at once."""
    from raylc.run.session import RayUnavailable, check_ray_address

    with _grpc_server() as port:
        t0 = time.monotonic()
        with pytest.raises(RayUnavailable, match=r"^Ray address 127\.0\.0\.1:\d+ answered, but not as a Ray cluster "
                                                 r"\(a gRPC server without Ray's GCS"):
            check_ray_address(f"127.0.0.1:{port}", 600)
        assert time.monotonic() - t0 < 60  # at once, not at the limit


def test_a_gcs_that_wants_a_token_is_named_at_once(monkeypatch):
    """A GCS with Ray's token authentication refuses a driver that sends no token (an explicit
    address never turns token mode on); ray.init would fail after about 20 s saying only that it
    could not connect. The check's cluster-id call is refused the same way and says what to set."""
    import grpc
    from ray._private.authentication import authentication_utils

    from raylc.run.session import RayUnavailable, check_ray_address

    calls = []

    def refuse(_request, context):
        calls.append(dict(context.invocation_metadata()))
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken: Authentication token is missing")

    gcs = grpc.method_handlers_generic_handler("ray.rpc.NodeInfoGcsService",
                                               {"GetClusterId": grpc.unary_unary_rpc_method_handler(refuse)})
    monkeypatch.setattr(authentication_utils, "is_token_auth_enabled", lambda: False)
    with _grpc_server(gcs) as port:
        t0 = time.monotonic()
        with pytest.raises(RayUnavailable) as err:
            check_ray_address(f"127.0.0.1:{port}", 600, "ray.address")
        assert time.monotonic() - t0 < 60  # at once, not at the limit
    assert str(err.value) == (f"ray.address 127.0.0.1:{port} (from the job file) asks for Ray's auth token: set "
                              "RAY_AUTH_MODE=token, with the cluster's token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH "
                              "or ~/.ray/auth_token; fix ray.address, or remove it to start a local Ray")
    assert len(calls) == 1 and "authorization" not in calls[0]


@pytest.mark.slow
def test_default_limit_silent_cluster_and_jobs_api(tmp_path, silent):
    """Acceptance at the default ray.connect_timeout_s (60 s), both at once so that the test
    takes about a minute, not two: `raylc run` with RAY_ADDRESS at a silent port and `raylc
    submit` to a silent port each fail in under 70 s with one line."""
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "job.yaml").write_text(SMALL)
    t0 = time.monotonic()
    run = subprocess.Popen([*RAYLC, "run", "job.yaml", "--store", str(tmp_path / "store")], cwd=wd,
                           stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=_env(RAY_ADDRESS=f"127.0.0.1:{silent.port}"))
    sub = subprocess.Popen([*RAYLC, "submit", "job.yaml", "--address", f"http://127.0.0.1:{silent.port}",
                            "--working-dir", str(wd)],
                           cwd=wd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    ended = {}
    for name, proc in (("run", run), ("submit", sub)):
        out, err = proc.communicate(timeout=120)
        ended[name] = (time.monotonic() - t0, subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    took, proc = ended["run"]
    assert proc.returncode == 1 and took < 70, (took, proc.stderr[-2000:])
    assert _one_line(proc).startswith(f"error: RAY_ADDRESS=127.0.0.1:{silent.port} (from the environment) did not "
                                      "answer within 60 s")
    assert not (tmp_path / "store").exists()
    took, proc = ended["submit"]
    assert proc.returncode == 1 and took < 70, (took, proc.stderr[-2000:])
    assert _one_line(proc).startswith(f"error: http://127.0.0.1:{silent.port}: did not answer within 60 s")


def test_submit_silent_port_within_job_files_limit(scenarios):
    launched, ctx = scenarios["submit-silent"]
    _, proc = launched.result()
    assert proc.returncode == 1, proc.stderr
    assert _since_contact(launched, ctx["server"].first_contact) < 45  # the 2 s limit, not the 60 s default
    assert _one_line(proc) == (f"error: {ctx['address']}: did not answer within 2 s to GET /api/version "
                               f"(ray.connect_timeout_s); is it the Ray dashboard address (http://HEAD:8265)?")


def test_submit_jobs_api_that_stops_answering(scenarios):
    """The version check answers, the next request (the client's own version check or the
    upload) never does: the client's requests are bounded too."""
    launched, ctx = scenarios["submit-hang"]
    _, proc = launched.result()
    assert proc.returncode == 1, proc.stderr
    assert _since_contact(launched, ctx["api"].first_request) < 45  # the 2 s limit, not the 60 s default
    assert _one_line(proc) == (f"error: {ctx['address']}: did not answer within 2 s to the Jobs API while submitting "
                               f"(ray.connect_timeout_s)")


def test_submit_log_following_is_bounded(scenarios):
    """Submitted; the log stream never answers and the status answers once (RUNNING), then
    never: the following ends with one line instead of waiting forever."""
    launched, ctx = scenarios["submit-status"]
    _, proc = launched.result()
    address = ctx["address"]
    assert proc.returncode == 1, proc.stderr
    assert _since_contact(launched, ctx["api"].first_request) < 45  # bounded by the 2 s limits
    assert proc.stdout.strip() == "submitted raysubmit_t"
    assert "Traceback" not in proc.stderr
    *ray_info, last = proc.stderr.strip().splitlines()  # Ray's own INFO line: the package exists already
    assert all("INFO dashboard_sdk.py" in line for line in ray_info), proc.stderr
    assert last == (f"error: {address}: stopped answering (no reply within 2 s asking for the status of "
                    f"raysubmit_t); the job may still run: `ray job status raysubmit_t --address {address}`")
    assert ctx["api"].status_calls == 2


@pytest.mark.ray
def test_live_gcs_passes_the_check(ray_session):
    """The reachability check (a TCP connect, then an HTTP/2 SETTINGS reply) accepts a real GCS
    at once; an HTTP/1 server is named as not a Ray cluster."""
    from raylc.run.session import RayUnavailable, check_ray_address

    port = int(ray_session.get_runtime_context().gcs_address.rsplit(":", 1)[1])
    t0 = time.monotonic()
    check_ray_address(f"127.0.0.1:{port}", 5)
    check_ray_address(f"ray://127.0.0.1:{port}", 5)
    assert time.monotonic() - t0 < 4.5  # neither waited out its 5 s limit (a busy machine slows both)
    api = FakeJobsAPI("hang")
    try:
        with pytest.raises(RayUnavailable,
                           match=r"^ray.address 127.0.0.1:\d+ \(from the job file\) "
                                 r"answered, but not as a Ray cluster"):
            check_ray_address(api.address.removeprefix("http://"), 5, "ray.address")
    finally:
        api.close()



@pytest.mark.ray
def test_per_task_ray_tasks_fail_within_their_no_progress_limit(ray_session):
    """`map_tasks` (the DOLCE fits, LongScore as Ray tasks) waits at most its no-progress limit for a
    task to finish, then fails in one line and cancels the tasks still pending: the session's two
    CPUs are free again, so the next map runs (without the cancel it would stall too)."""
    import polars as pl

    from raylc.run.session import RayUnavailable
    from raylc.run.tasks import TasksStalled, map_tasks, raising_own_errors

    def _height_after(frame, seconds):  # defined here, so Ray pickles it by value (workers cannot import doubles)
        time.sleep(seconds)
        return frame.height

    def _fails_if_short(frame, seconds):
        if frame.height == 1:
            raise ValueError("task: bad frame")
        time.sleep(seconds)
        return frame.height

    frames = [pl.DataFrame({"x": [1, 2]}), pl.DataFrame({"x": [1, 2, 3]})]
    t0 = time.monotonic()
    with pytest.raises(TasksStalled, match=r"^_height_after: no Ray task finished in 2 s \(2 of 2 still pending, "
                                           r"now cancelled\): is a node with a free CPU alive\?") as raised:
        map_tasks(_height_after, frames, 600.0, no_progress_s=2)
    assert time.monotonic() - t0 < 60 and isinstance(raised.value, RayUnavailable)  # exit 1 on the command line
    assert "\n" not in str(raised.value)
    assert map_tasks(_height_after, frames, 0.0, no_progress_s=120) == [2, 3]
    # a task's own error arrives as soon as it is raised; the sleeping one is cancelled, not waited for
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="^task: bad frame$"):
        raising_own_errors(map_tasks)(_fails_if_short, [frames[0], pl.DataFrame({"x": [1]})], 600.0)
    assert time.monotonic() - t0 < 120
    assert map_tasks(_height_after, frames, 0.0, no_progress_s=120) == [2, 3]


def test_a_clients_proxied_connections_keep_the_total_limit(monkeypatch):
    """A hosted API behind HTTPS_PROXY: httpx mounts a transport per proxy, and each of its pools
    gets the limited connections, the client's own too; a read past the limit raises a timeout."""
    import httpcore
    import httpx

    from raylc.io.deadline import _LimitedBackend, _LimitedStream, bounded, total_limit

    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    client = httpx.Client(trust_env=True)
    assert bounded(client) and client._mounts
    pools = [t._pool for t in (client._transport, *client._mounts.values()) if t is not None]
    assert len(pools) >= 2 and all(isinstance(p._network_backend, _LimitedBackend) for p in pools)
    assert bounded(client)  # twice: not wrapped twice
    assert all(not isinstance(p._network_backend._backend, _LimitedBackend) for p in pools)
    client.close()

    class Slow(httpcore.NetworkStream):
        def read(self, max_bytes, timeout=None):
            self.timeout = timeout
            return b"x"

        def close(self):
            self.closed = True

    stream = _LimitedStream(Slow())
    assert stream.read(1, 5.0) == b"x" and stream._stream.timeout == 5.0  # no limit: the read's own
    with total_limit(0.5):
        stream.read(1, 5.0)
        assert stream._stream.timeout <= 0.5  # cut to what is left
        with total_limit(100):  # an inner limit never extends the outer one, and gives it back
            stream.read(1, 5.0)
            assert stream._stream.timeout <= 0.5
        time.sleep(0.6)
        with pytest.raises(httpcore.ReadTimeout):
            stream.read(1, 5.0)
        with pytest.raises(httpcore.ConnectTimeout):  # a TLS handshake past the limit closes the socket
            stream.start_tls(None)
        assert stream._stream.closed
    assert stream.read(1, 5.0) == b"x" and stream._stream.timeout == 5.0

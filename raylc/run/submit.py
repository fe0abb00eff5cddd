"""Submit a job file to a Ray cluster with Ray's JobSubmissionClient.

The entrypoint is ``python -m raylc run JOB`` in a runtime environment whose working
directory is the local project folder (so the cluster runs this exact code); the
cluster's Python environment provides raylc's dependencies (see cluster/README.md).
Equivalent to ``ray job submit --working-dir . -- python -m raylc run JOB``.

Every wait on the cluster is bounded by the job's ``ray.connect_timeout_s`` (60 s by
default): a first ``GET /api/version`` (urllib, with that timeout) before the client is made,
the client's own HTTP requests (``requests`` with that timeout: Ray's ``SubmissionClient._do_request``
forwards it), and the log stream, which waits at most that long for a line before it asks for
the job's status (a status request that does not answer in time ends the submission).

A cluster that has just started may not have its job agent yet: Ray's head then answers the
submission with HTTP 500 "No available agent to submit job, please try again later." (after
waiting 10 s for the agent itself). That one answer is retried, with a pause that doubles from
0.5 s to 5 s, for at most ``ray.connect_timeout_s`` from the first refusal (plus the last
request's own time limit), saying once what it waits for; once it waits, a dropped connection
is retried the same way (a loaded head may close one while its agent starts). Every other error
ends the submission at once.
"""

from __future__ import annotations

import asyncio
import shlex
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from raylc.io.deadline import call_within
from raylc.io.names import path_segment
from raylc.io.store import check_address
from raylc.io.urls import check_http_url
from raylc.run.session import verbose
from raylc.spec import JobSpecError, load_job, parse_overrides

EXCLUDES = [".venv", "runs", ".git", "**/__pycache__", ".pytest_cache", ".hypothesis", "*.egg-info"]
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
STATUS_POLL_S = 10.0  # without log lines for this long (at most the timeout), ask for the job's status
#: the head's answer while its job agent is not registered (Ray 2.60,
#: ray/dashboard/modules/job/job_head.py ``JobHead.submit_job``: HTTP 500 once ``get_target_agent``
#: timed out): the one submission error that is retried
AGENT_NOT_READY = "No available agent to submit job"
AGENT_PAUSES_S = (0.5, 5.0)  # the first pause between refused submissions and the longest (doubling)
_END = object()


class SubmitError(RuntimeError):
    """Submission failed (cluster unreachable, job failed); one-line message."""


class AddressError(ValueError):
    """``--address`` is not a dashboard address (bad input, exit 2); one-line message."""


def _http(address: str) -> Optional[str]:
    """The dashboard's http(s) URL of ``address`` (``HOST:PORT`` is http); None for a module
    address such as ``anyscale://``, which is left to Ray's client."""
    url = address if "://" in address else f"http://{address}"
    return url if url.startswith(("http://", "https://")) else None


def check_cluster_address(address: str) -> None:
    """An ``http(s)`` address (or ``HOST:PORT``) must be one (:func:`raylc.io.urls.check_http_url`);
    else :class:`AddressError`, before anything is contacted (:func:`_http`)."""
    url = _http(address)
    if url is None:
        return
    try:
        check_http_url(url, "http://HEAD:8265")
    except ValueError as exc:
        raise AddressError(f"--address {address!r}: {exc}") from None


def build_entrypoint(job_file: str, store: Optional[str], run_id: Optional[str], settings: Sequence[str] = (),
                     verbose: bool = False) -> str:
    args = ["python", "-m", "raylc", *(["--verbose"] if verbose else []), "run", job_file]
    if store:
        args += ["--store", store]
    if run_id:
        args += ["--run-id", run_id]
    for setting in settings:
        args += ["--set", setting]
    return " ".join(shlex.quote(a) for a in args)


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it wraps) is a timeout: ``requests``' Timeout, a socket
    timeout, asyncio's."""
    seen: set[int] = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        names = {c.__name__ for c in type(e).__mro__}
        if (isinstance(e, (TimeoutError, socket.timeout, asyncio.TimeoutError))
                or names & {"Timeout", "ReadTimeoutError", "ConnectTimeoutError"}):
            return True
        e = e.__cause__ or e.__context__
    return False


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _silent(address: str, timeout_s: float, doing: str, hint: str = "") -> SubmitError:
    return SubmitError(f"{address}: did not answer within {timeout_s:g} s {doing} (ray.connect_timeout_s){hint}")


def check_dashboard(address: str, timeout_s: float) -> None:
    """``GET <address>/api/version`` within ``timeout_s`` (each of connect and read) and twice that
    in all (a server that trickles bytes; :func:`raylc.io.deadline.call_within`): any HTTP reply
    will do (the client's own requests judge it); a refused, unresolvable or silent address is a
    :class:`SubmitError`."""
    base = _http(address)
    if base is None:
        return
    url = base.rstrip("/") + "/api/version"

    def get() -> None:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            resp.read(1 << 16)

    try:
        call_within(get, 2 * timeout_s)
    except urllib.error.HTTPError:
        return  # it answered
    except Exception as exc:  # URLError (refused, DNS), timeouts, resets
        if _timed_out(exc) or _timed_out(getattr(exc, "reason", None) or exc):
            raise _silent(address, timeout_s, "to GET /api/version",
                          "; is it the Ray dashboard address (http://HEAD:8265)?") from None
        reason = getattr(exc, "reason", exc)
        detail = getattr(reason, "strerror", None) or str(reason)
        raise SubmitError(f"{address}: could not submit ({detail})") from None


def agent_not_ready(exc: BaseException) -> Optional[str]:
    """The head's reply if ``exc`` is its :data:`AGENT_NOT_READY` answer, else None. Ray's client
    raises ``RuntimeError("Request failed with status code 500: <reply>.")``."""
    text = str(exc)
    at = text.find(AGENT_NOT_READY)
    if at < 0:
        return None
    reply = text[at:].splitlines()[0].strip()
    return reply[:-1] if reply.endswith("..") else reply  # the client's own "." after the reply


def _dropped(exc: BaseException) -> bool:
    """``exc`` says the server closed or reset the connection (``requests``' "Connection aborted",
    http.client's RemoteDisconnected, a reset): what a head under load may do while its agent starts."""
    text = f"{type(exc).__name__}: {exc}"
    return any(s in text for s in ("Connection aborted", "RemoteDisconnected", "Connection reset",
                                   "ConnectionResetError"))


def when_agent_ready(send: Callable[[], Any], address: str, limit_s: float, notice: Callable[[str], None],
                     sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Any:
    """``send()``, again while the cluster answers :data:`AGENT_NOT_READY`, pausing
    :data:`AGENT_PAUSES_S` between tries, until ``limit_s`` after the first refusal; ``notice``
    gets one line when the waiting starts. After the limit, a :class:`SubmitError`."""
    deadline: Optional[float] = None
    last: Optional[str] = None
    pause, longest = AGENT_PAUSES_S
    while True:
        try:
            return send()
        except Exception as exc:
            reply = agent_not_ready(exc)
            if reply is None and deadline is not None and _dropped(exc):
                reply = last  # a head still starting may also drop the connection: the wait goes on
            if reply is None:
                raise
        last = reply
        now = clock()
        if deadline is None:
            deadline = now + limit_s
            notice(f"waiting for the cluster's job agent at {address}: {reply!r} "
                   f"(retrying for up to {limit_s:g} s, ray.connect_timeout_s)")
        elif now >= deadline:
            raise SubmitError(f"{address}: the cluster's job agent was not up within {limit_s:g} s ({reply!r}); "
                              f"a cluster that is still starting may need longer: "
                              f"--set ray.connect_timeout_s=SECONDS") from None
        sleep(min(pause, deadline - now))
        pause = min(2 * pause, longest)


def make_client(address: str, timeout_s: float) -> Any:
    """A :class:`ray.job_submission.JobSubmissionClient` whose every HTTP request times out
    after ``timeout_s`` (``requests``' connect and read timeouts)."""
    from ray.job_submission import JobSubmissionClient

    class _BoundedClient(JobSubmissionClient):
        def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:  # dashboard_sdk.py
            kwargs.setdefault("timeout", timeout_s)
            return super()._do_request(method, endpoint, **kwargs)

    return _BoundedClient(address)


def _status(client: Any, job_id: str, address: str, timeout_s: float) -> str:
    """The job's status (``SUCCEEDED``, ``RUNNING``, ...), within ``timeout_s``."""
    try:
        return str(client.get_job_status(job_id)).split(".")[-1]
    except Exception as exc:
        if _timed_out(exc):
            raise SubmitError(
                f"{address}: stopped answering (no reply within {timeout_s:g} s asking for the status of {job_id}); "
                f"the job may still run: `ray job status {job_id} --address {address}`") from None
        raise SubmitError(f"{address}: could not get the status of {job_id} ({_one_line(exc)})") from None


async def _follow(client: Any, job_id: str, address: str, timeout_s: float, log: Callable[[str], None]) -> None:
    """Print the job's log lines as they come until the stream ends. Ray's ``tail_job_logs``
    (a websocket) waits for a message without a limit, so it is read by a task into a queue,
    and whenever no line came for ``min(STATUS_POLL_S, timeout_s)`` the job's status is asked
    (bounded): a finished job ends the following, a cluster that does not answer raises."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump() -> None:
        try:
            async for chunk in client.tail_job_logs(job_id):
                await queue.put(chunk)
        except Exception:  # log streaming is best effort; the status is authoritative
            pass
        finally:
            await queue.put(_END)

    task = asyncio.ensure_future(pump())
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), min(STATUS_POLL_S, timeout_s))
            except asyncio.TimeoutError:
                if _status(client, job_id, address, timeout_s) in TERMINAL:
                    return
                continue
            if item is _END:
                return
            log(str(item).rstrip("\n"))
    finally:
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass


def submit(
    job_file: Path,
    address: str,
    store: Optional[str] = None,
    run_id: Optional[str] = None,
    wait: bool = True,
    working_dir: Path = Path("."),
    log: Callable[[str], None] = print,
    settings: Sequence[str] = (),
    notice: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[str, str]:
    """Validate the job file, submit it (waiting for a job agent that is starting, :func:`when_agent_ready`;
    ``notice`` gets its line, ``sleep`` its pauses), and (``wait``) follow its logs; returns (job id,
    final status). ``settings``: ``--set key.path=value`` overrides, checked here and passed on to
    ``raylc run``."""
    check_cluster_address(address)
    if run_id is not None:
        path_segment(run_id, "run id")  # the cluster's run would refuse it: refuse it before uploading
    wd = working_dir.resolve()
    if not wd.is_dir():
        raise JobSpecError(f"{working_dir}: --working-dir is not a folder")
    try:
        rel = job_file.resolve().relative_to(wd)
    except ValueError:
        raise JobSpecError(f"{job_file}: job file must be inside the working directory {wd}") from None
    overrides = {**parse_overrides(settings), **({"store.path": store} if store is not None else {})}
    job = load_job(job_file, overrides)  # fail fast, locally, on a bad job file
    check_address(job.store.path)  # the cluster's store: its address only, nothing contacted
    timeout_s = job.ray.connect_timeout_s
    check_dashboard(address, timeout_s)
    try:
        client = make_client(address, timeout_s)
        job_id = when_agent_ready(lambda: client.submit_job(
            entrypoint=build_entrypoint(rel.as_posix(), store, run_id, settings, verbose()),
            runtime_env={"working_dir": str(wd), "excludes": EXCLUDES},
            metadata={"raylc_job": rel.as_posix()},
        ), address, timeout_s, notice, sleep)
    except SubmitError:
        raise
    except Exception as exc:  # connection refused, bad address, upload failure, no reply
        if _timed_out(exc):
            raise _silent(address, timeout_s, "to the Jobs API while submitting") from None
        raise SubmitError(f"{address}: could not submit ({_one_line(exc)})") from None
    log(f"submitted {job_id}")
    if not wait:
        return job_id, "PENDING"

    asyncio.run(_follow(client, job_id, address, timeout_s, log))
    status = _status(client, job_id, address, timeout_s)
    while status not in TERMINAL:
        time.sleep(1.0)
        status = _status(client, job_id, address, timeout_s)
    if status != "SUCCEEDED":
        raise SubmitError(f"job {job_id} ended {status}; see `ray job logs {job_id} --address {address}`")
    return job_id, status

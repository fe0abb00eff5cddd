"""The Ray session: join the cluster named by ``ray.address`` or RAY_ADDRESS (checked, then
joined, each within ``ray.connect_timeout_s``) or start a local Ray, keep Ray's own console
output back unless ``--verbose``, and say a failure of Ray code in one line (:func:`root_cause`)."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from raylc.io.urls import ray_host_port

if TYPE_CHECKING:
    from raylc.spec import Job


def ensure_ray(job: Job) -> None:
    """Join the cluster at ``ray.address`` or RAY_ADDRESS, else start a local Ray sized to the
    machine. A cluster that does not answer within ``ray.connect_timeout_s`` is a
    :class:`RayUnavailable` (one line naming the address and where it came from)."""
    address, source = job.ray.cluster()
    init_ray(address, job.ray.num_cpus, job.ray.include_dashboard, timeout_s=job.ray.connect_timeout_s, source=source)


_RAISED = re.compile(r"^([A-Za-z_][\w.]*): (\S.*)$")


def root_cause(exc: BaseException) -> str:
    """One line: the innermost exception of a chain (Ray wraps user-code errors twice). An
    actor that died in its constructor (``ActorDiedError``) carries the user code's error only
    as traceback text: its last ``Type: message`` line is the cause."""
    chain = [exc]
    while chain[-1].__cause__ is not None and chain[-1].__cause__ is not chain[-1]:
        chain.append(chain[-1].__cause__)  # type: ignore[arg-type]
    # a task's own exception (RayTaskError.cause), not what Ray chained under it (an empty SystemException)
    tasks = [e for e in chain if isinstance(getattr(e, "cause", None), BaseException) and type(e).__name__.startswith(
        "RayTaskError")]
    if tasks and not str(chain[-1]).strip():  # Ray Data appends its retry advice to the message: the first line
        cause = tasks[-1].cause  # type: ignore[attr-defined]
        return f"{type(cause).__name__}: {(str(cause).strip().splitlines() or [''])[0]}".strip()
    for e in chain:
        if getattr(e, "_actor_init_failed", False):
            raised = [m for m in map(_RAISED.match, (ln.strip() for ln in str(e).splitlines())) if m]
            if raised:
                return f"{raised[-1].group(1).rsplit('.', 1)[-1]}: {raised[-1].group(2)}"
        elif type(e).__name__ in ("ActorDiedError", "RayActorError"):  # its process exited mid-task
            first = (str(e).strip().splitlines() or [""])[0]
            return f"{type(e).__name__}: {first}"
    text = str(chain[-1]).strip().splitlines()
    return f"{type(chain[-1]).__name__}: {text[-1] if text else ''}".strip()


class RayUnavailable(RuntimeError):
    """The Ray cluster named by an address did not answer (in time); the message is one line."""


CONNECT_TIMEOUT_S = 60.0  # default of ray.connect_timeout_s
REFUSED_GRACE_S = 5.0  # a refused connection is retried this long (a head that is starting), then fails
# an HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, the Ray Client
# server) answers with its own SETTINGS frame (RFC 9113 §3.4), a silent port with nothing
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _who(address: str, source: Optional[str]) -> tuple[str, str]:
    """(the address and where it came from, what to do about it) for a one-line error."""
    if source == "RAY_ADDRESS":
        return f"RAY_ADDRESS={address} (from the environment)", "unset RAY_ADDRESS to start a local Ray"
    if source:
        return f"{source} {address} (from the job file)", f"fix {source}, or remove it to start a local Ray"
    return f"Ray address {address}", "check the address"


def check_ray_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S, source: Optional[str] = None) -> None:
    """Raise :class:`RayUnavailable` unless a gRPC server (Ray's GCS) answers at ``address``
    (``host:port`` or ``ray://host:port``) within ``timeout_s``: ``ray.init`` itself waits for
    an unreachable GCS far longer (Ray 2.60, ``_private/node.py`` ``Node._init_gcs_client``:
    ``NUM_REDIS_GET_RETRIES`` = 20 attempts, each a ``GcsClient`` that waits for the cluster id,
    about 40 s, printing a GCS warning every 30 s). A TCP connect, then an HTTP/2 preface
    whose SETTINGS reply proves a gRPC server listens, then for a GCS address its cluster id
    from the address that answered (:func:`_ask_gcs`), all by the one deadline; with RAY_USE_TLS
    (the TLS handshake comes first) the connect alone. A refused connection is retried for
    :data:`REFUSED_GRACE_S`. ``auto``, ``local`` and addresses without a port are left to
    ``ray.init``."""
    who, hint = _who(address, source)
    host, port = ray_host_port(address)
    if "://" in address and not host:  # ray:// (RAY_ADDRESS): Ray would wait on a DNS lookup
        raise RayUnavailable(f"{who}: no host; {hint}")
    if not port.isdigit() or not host:
        return
    host = host.strip("[]")
    tls = os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")
    ask_gcs = "://" not in address and not tls and _gcs_rpc_imported()  # imports before the clock (about 0.2 s)
    start = time.monotonic()
    deadline = start + timeout_s
    last = "no reply"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RayUnavailable(f"{who} did not answer within {timeout_s:g} s ({last}); {hint}")
        try:
            with socket.create_connection((host, int(port)), timeout=remaining) as sock:
                if tls:
                    return
                peer = sock.getpeername()
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                sock.sendall(_H2_HELLO)
                head = b""
                while len(head) < 9:
                    chunk = sock.recv(9 - len(head))
                    if not chunk:
                        break
                    head += chunk
            if len(head) == 9 and head[3] == 4:  # frame type 4: SETTINGS
                if ask_gcs:
                    target = f"ipv6:[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"ipv4:{peer[0]}:{peer[1]}"
                    _ask_gcs(target, deadline, timeout_s, who, hint)
                return
            raise RayUnavailable(
                f"{who} answered, but not as a Ray cluster (no gRPC reply: expected the GCS address, "
                f"host:6379, not the dashboard's); {hint}")
        except socket.gaierror as exc:
            raise RayUnavailable(f"{who}: cannot resolve {host!r} ({exc.strerror}); {hint}") from None
        except ConnectionRefusedError:
            last = "connection refused"
            if time.monotonic() - start >= min(REFUSED_GRACE_S, timeout_s):
                raise RayUnavailable(f"{who} refused the connection (no Ray cluster there); {hint}") from None
        except (socket.timeout, TimeoutError):
            last = "no reply"
            continue
        except OSError as exc:  # reset, host or network unreachable: retried until the deadline
            last = exc.strerror or type(exc).__name__
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))


def _gcs_rpc_imported() -> bool:
    """Import what :func:`_ask_gcs` needs (Ray 2.60's gRPC channel, token check and GCS stubs);
    False for a Ray without them."""
    try:
        import grpc  # noqa: F401
        from ray._private.authentication import authentication_utils  # noqa: F401
        from ray._private.grpc_utils import init_grpc_channel  # noqa: F401
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc  # noqa: F401
    except ImportError:
        return False
    return True


def _ask_gcs(target: str, deadline: float, timeout_s: float, who: str, hint: str) -> None:
    """Ask the GCS at ``target`` for its cluster id (``NodeInfoGcsService.GetClusterId``, the
    first call ``ray.init`` makes) by ``deadline``, with the token ``ray.init`` would send
    (Ray's ``init_grpc_channel``): a server that answered the HTTP/2 preface and then says
    nothing would hold ``ray.init`` in Ray's C++ client for about 40 s, past any Python limit.
    No reply in time, a gRPC server without that service, or a refusal of this driver's token
    (or of none: an explicit address never turns token authentication on, Ray 2.60
    ``_private/worker.py``) is a :class:`RayUnavailable`; anything else is left to ``ray.init``."""
    import grpc
    from ray._private.authentication import authentication_utils
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    try:
        channel = init_grpc_channel(target, options=[("grpc.enable_http_proxy", 0)])
    except Exception:  # a token Ray cannot load, ...: ray.init says why
        return
    with channel:
        try:
            gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(
                gcs_service_pb2.GetClusterIdRequest(), timeout=max(deadline - time.monotonic(), 0.001))
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise RayUnavailable(f"{who} answered, but its GCS did not reply within {timeout_s:g} s "
                                     f"(ray.connect_timeout_s); {hint}") from None
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise RayUnavailable(f"{who} answered, but not as a Ray cluster (a gRPC server without Ray's GCS, "
                                     f"or a Ray older than this one: expected the GCS address, host:6379); "
                                     f"{hint}") from None
            if code == grpc.StatusCode.UNAUTHENTICATED:
                where = "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
                raise RayUnavailable(
                    f"{who} refused this driver's Ray auth token (the cluster's token goes in {where}); {hint}"
                    if authentication_utils.is_token_auth_enabled() else
                    f"{who} asks for Ray's auth token: set RAY_AUTH_MODE=token, with the cluster's token in "
                    f"{where}; {hint}") from None
        except Exception:  # Ray's token interceptor that cannot load a token, ...: ray.init says why
            return


def init_ray(address: Optional[str] = None, num_cpus: Optional[int] = None, include_dashboard: bool = False,
             timeout_s: float = CONNECT_TIMEOUT_S, source: Optional[str] = None) -> None:
    """``ray.init`` once per process: join ``address`` if given, else start a local instance
    (never the cluster a ``ray start`` on this machine runs: ``auto`` joins that).
    An address is checked first (:func:`check_ray_address`, within ``timeout_s``); ``source``
    says where it came from for the error (``RAY_ADDRESS``, ``ray.address``; default:
    RAY_ADDRESS when ``address`` is its value). Failing to join is a :class:`RayUnavailable`.
    A Python SIGTERM handler set before (``raylc run``'s) is set again after: the core worker
    that ``ray.init`` starts installs absl's failure signal handler, SIGTERM included, which
    prints a stack and aborts the process."""
    import ray

    if ray.is_initialized():
        return
    main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    try:
        _init(address, num_cpus, include_dashboard, timeout_s, source)
    finally:
        if callable(sigterm):
            signal.signal(signal.SIGTERM, sigterm)


VERBOSE_ENV = "RAYLC_VERBOSE"


def verbose() -> bool:
    """Whether Ray's own logs reach the console (``raylc --verbose``, or RAYLC_VERBOSE=1)."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def _quiet_core_worker(ray: Any) -> None:
    """Keep the driver's core worker (C++) from printing error-level lines that are not errors
    while ``ray.init`` creates it: Ray Data passes every actor its transformer as an object
    reference, and the core worker logs "constructor arguments in the object store" at error
    level for each actor with restarts (ray-project/ray#57733). RAY_BACKEND_LOG_LEVEL is read
    when the core worker starts, inside ``ray._private.worker.connect``, after the local node's
    processes were spawned, so those processes, the workers they start and a cluster's nodes
    keep their log levels. An error in ``connect`` is raised as usual (and made one line by the
    caller); only its console output is dropped. Nothing changes at ``--verbose``, or if the
    user set the variable."""
    if verbose() or "RAY_BACKEND_LOG_LEVEL" in os.environ:
        return
    worker = ray._private.worker
    connect = getattr(worker, "connect", None)
    if connect is None or getattr(connect, "_raylc_quiet", False):
        return

    def quiet_connect(*args: Any, **kwargs: Any) -> Any:
        os.environ["RAY_BACKEND_LOG_LEVEL"] = "fatal"
        sys.stderr.flush()
        saved = os.dup(2)  # the C++ logger announces the level it read on fd 2: hide that one line
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            return connect(*args, **kwargs)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)
            os.environ.pop("RAY_BACKEND_LOG_LEVEL", None)

    quiet_connect._raylc_quiet = True  # type: ignore[attr-defined]
    worker.connect = quiet_connect


class _HeldBack(logging.Filter):
    """Drops every record from Ray Data's console: its start and end lines ("Progress bars
    disabled", "execution finished") and its error records (a failed stream is raised to raylc,
    which prints it as one line). They stay in the session's ``logs/ray-data/`` files."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


def _quiet_ray_data() -> None:
    """Ray Data's console handler (``ray/data/_internal/logging.py``) prints nothing unless
    ``--verbose``: raylc's own lines say what the stream does."""
    if verbose():
        return
    for handler in logging.getLogger("ray.data").handlers:
        console = isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
        if console and not any(isinstance(f, _HeldBack) for f in handler.filters):
            handler.addFilter(_HeldBack())


class _ImportPaths(list):
    """A job's ``_py_driver_sys_path`` that leaves out folders holding another ``raylc``."""

    def extend(self, paths: Any) -> None:
        super().extend(p for p in paths if not _shadows_raylc(p))


def _shadows_raylc(folder: str) -> bool:
    import raylc

    here = Path(folder) / "raylc" / "__init__.py"
    return here.is_file() and here.resolve() != Path(raylc.__file__).resolve()


def _job_config() -> dict[str, Any]:
    """``ray.init(job_config=...)`` when the driver runs from a folder holding another ``raylc/``
    checkout than the one imported: Ray puts the driver's working folder first on every worker's
    import path (Ray 2.60, ``_private/worker.py:2716-2719``), where it would shadow raylc."""
    if not _shadows_raylc(os.getcwd()):
        return {}
    from ray.job_config import JobConfig

    config = JobConfig()
    config._py_driver_sys_path = _ImportPaths(config._py_driver_sys_path)
    return {"job_config": config}


class _Late(BaseException):
    """:func:`_within`'s limit passed (a BaseException, so that Ray's own ``except Exception`` retries
    do not take it for one of theirs)."""


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``, given up with :class:`_Late` once ``seconds`` have passed: ``ray.init`` joining
    a server that answered the address check and then says nothing more waits without a limit
    (a Ray Client server, ``ray://``: its ``ClusterInfo`` call has none) or for Ray's own retries
    (a GCS: about 10 minutes). In the main thread by SIGALRM (a call inside Ray's C++ code is
    interrupted when it returns to Python: a GCS client's wait, about 40 s). Elsewhere (a caller's
    thread), or while another interval timer runs, ``call`` runs in a daemon thread that is left
    behind at the limit: a join that ends later still leaves Ray initialised in this process."""
    if (threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
            and signal.getitimer(signal.ITIMER_REAL)[0] == 0):
        def late(signum: int, frame: Any) -> None:
            raise _Late()

        before = signal.signal(signal.SIGALRM, late)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="raylc-ray-init", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise _Late()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _init(address: Optional[str], num_cpus: Optional[int], include_dashboard: bool, timeout_s: float,
          source: Optional[str]) -> None:
    import ray

    _quiet_core_worker(ray)
    common: dict[str, Any] = {"logging_level": logging.INFO if verbose() else logging.ERROR, "configure_logging": True,
                              **_job_config()}
    if address:
        if source is None and address == os.environ.get("RAY_ADDRESS"):
            source = "RAY_ADDRESS"
        check_ray_address(address, timeout_s, source)
        who, hint = _who(address, source)
        try:
            _within(timeout_s, lambda: ray.init(address=address, **common))
        except _Late:
            raise RayUnavailable(f"{who} answered, but this driver had not joined it within {timeout_s:g} s "
                                 f"(ray.connect_timeout_s); {hint}") from None
        except Exception as exc:  # version mismatch, a GCS that answered but refused this driver, ...
            detail = (str(exc).strip().splitlines() or [""])[0]
            raise RayUnavailable(
                f"{who}: could not join the Ray cluster ({type(exc).__name__}: {detail}); {hint}") from None
    else:
        try:
            # "local": a Ray of its own even where `ray start` or ray.cluster_utils left an address in
            # Ray's temp folder, which ray.init() would join (a cluster raylc would take for one that
            # never grows); RAY_ADDRESS=auto joins that one
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=include_dashboard, **common)
        except Exception as exc:  # Ray's own start-up time limit (a raylet or GCS too slow on a loaded machine)
            detail = (str(exc).strip().splitlines() or [""])[0]
            raise RayUnavailable(f"a local Ray instance did not start ({type(exc).__name__}: {detail}); "
                                 "try again, or join a running cluster with RAY_ADDRESS") from None

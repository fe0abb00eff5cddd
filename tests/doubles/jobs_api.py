"""A fake Ray Jobs API on 127.0.0.1 (a test double of the dashboard's job routes).

It answers ``GET /api/version`` as Ray 2.60 does, and then, per ``mode``:

* ``hang``: nothing else, ever (until :meth:`FakeJobsAPI.close`);
* ``status``: packages exist, a submission is accepted, the log websocket never answers, and the
  job's status is RUNNING once, then never answers;
* ``starting``: a head whose job agent is still starting: packages exist, the first ``refusals``
  submissions (every one when ``refusals`` is None) get Ray's HTTP 500 "No available agent to
  submit job, please try again later." (``ray/dashboard/modules/job/job_head.py``), the next is
  accepted, the job is SUCCEEDED, and any other GET (the log websocket) is 404.
  :attr:`FakeJobsAPI.posts` counts the submissions.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

#: the head's reply while no job agent is registered, as Ray 2.60 words it
NO_AGENT = "No available agent to submit job, please try again later."
JOB_ID = "raysubmit_t"


class FakeJobsAPI:
    """See the module docstring; ``address`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, mode: str, refusals: Optional[int] = 0) -> None:
        self.release = threading.Event()
        self.status_calls = 0
        self.posts = 0
        #: time.monotonic() of the first request (a client's limit runs from its first contact)
        self.first_request: Optional[float] = None
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, body: bytes, status: int = 200, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, data: dict) -> None:
                self._reply(json.dumps(data).encode())

            def _hang(self) -> None:
                api.release.wait(600)

            def handle_one_request(self):
                if api.first_request is None:
                    api.first_request = time.monotonic()
                super().handle_one_request()

            def do_GET(self):
                if self.path == "/api/version":
                    return self._json({"version": "4", "ray_version": "2.60.0", "ray_commit": "x"})
                if mode in ("status", "starting") and self.path.startswith("/api/packages/"):
                    return self._json({})
                if mode == "starting" and self.path == f"/api/jobs/{JOB_ID}":
                    return self._json({"type": "SUBMISSION", "submission_id": JOB_ID, "job_id": None,
                                       "status": "SUCCEEDED", "entrypoint": "python -m raylc run x"})
                if mode == "starting":  # the log websocket among them: the job's status is read instead
                    return self._reply(b"not found", 404, "text/plain")
                if mode == "status" and self.path == f"/api/jobs/{JOB_ID}":
                    api.status_calls += 1
                    if api.status_calls == 1:
                        return self._json({"type": "SUBMISSION", "submission_id": JOB_ID, "job_id": None,
                                           "status": "RUNNING", "entrypoint": "python -m raylc run x"})
                self._hang()

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if mode in ("status", "starting") and self.path == "/api/jobs/":
                    api.posts += 1
                    if mode == "starting" and (refusals is None or api.posts <= refusals):
                        return self._reply(NO_AGENT.encode(), 500, "text/plain; charset=utf-8")
                    return self._json({"job_id": JOB_ID, "submission_id": JOB_ID})
                self._hang()

            do_PUT = do_POST

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

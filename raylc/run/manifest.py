"""A run's manifest, ``<run>/manifest.json``: what the run is (its resolved job, fingerprint, seed,
package versions, the command line's overrides) and what it did (each stage's status, counts and
time; the infer stage's progress while it runs), as one typed, versioned model.

Like inspect_ai's ``EvalLog``, it carries the version of its format: a manifest without one was
written before the model existed (raylc up to 14bd8b5: version 1, the same keys as a plain
dict) and opens as it is, as does version 2 (no ``stopped`` stage, no budget record); one of a
later version than this raylc reads is refused in one line.
The run folder reads and writes it (:meth:`raylc.run.folder.RunFolder.manifest`); ``raylc
status``, ``raylc runs``, ``raylc report``, ``raylc compare`` and a resumed run read it.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, model_validator

VERSION = 3  #: this raylc's manifest format; 1: the untyped manifest of 14bd8b5 and before (no version key);
#: 2: before the ``stopped`` status and the budget record

Status = Literal["running", "done", "failed", "interrupted", "stopped"]


class Progress(BaseModel):
    """The infer stage's progress record (:class:`raylc.run.progress.InferProgress`): requests
    stored before this attempt (``reused``), to run, done so far, errors and tokens, and when
    the attempt started, was last updated and stored its first shard (epoch seconds)."""

    model_config = ConfigDict(extra="allow")

    reused: int = 0
    to_run: int = 0
    done: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    started_at: float
    updated_at: float
    first_at: Optional[float] = None
    first_done: Optional[int] = None


class Budget(BaseModel):
    """Where a stage ``stopped`` at the run's prompt-token cap (:mod:`raylc.run.budget`): the cap,
    the prompt tokens its stored requests were sent with (``sent``, the backend's count), the
    requests stored and those left unsent, and raylc's count of the tokens these would take."""

    max_prompt_tokens: int
    sent: int
    stored: int
    left: int
    left_tokens: int


class StageRecord(BaseModel):
    """A stage's record: its status, its counts (``rows``, None where unknown) and wall time once
    it ended, its progress while it runs (kept when it fails, is interrupted or stops), and the
    budget it stopped at (status ``stopped``)."""

    model_config = ConfigDict(extra="allow")

    status: Status
    rows: Optional[dict[str, Optional[int]]] = None
    seconds: Optional[float] = None
    progress: Optional[Progress] = None
    budget: Optional[Budget] = None


class Manifest(BaseModel):
    """``manifest.json``: ``job`` is the resolved job as JSON (:meth:`raylc.spec.Job.resolved`),
    so a reader needs no backend or suite to show it; ``plan`` the stages to run, in order."""

    model_config = ConfigDict(extra="allow")

    version: int = VERSION
    run_id: str
    job: dict[str, Any]
    fingerprint: str = ""
    seed: Optional[int] = None
    versions: dict[str, str] = {}
    overrides: dict[str, Any] = {}
    plan: list[str] = []
    stages: dict[str, StageRecord] = {}
    created_at: Optional[str] = None
    updated_at: Optional[str] = None
    finished_at: Optional[str] = None

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        """Versions 1 (no version key) and 2 have this model's keys: they open as the current version."""
        if isinstance(data, dict):
            version = data.get("version", 1)
            if not isinstance(version, int) or version > VERSION:
                raise ValueError(f"manifest version {version!r} is newer than this raylc reads (up to {VERSION}): "
                                 "update raylc")
            data = {**data, "version": VERSION}
        return data

    @property
    def job_name(self) -> Optional[str]:
        return self.job.get("name")

    @property
    def model(self) -> Optional[str]:
        """The probe's model (its backend's name when it has none)."""
        probe = self.job.get("probe") or {}
        return probe.get("model") or probe.get("backend")

    def finished(self) -> bool:
        """Whether the run ended with every stage done."""
        return bool(self.finished_at) and all(s.status == "done" for s in self.stages.values())

    def stopped(self) -> Optional[tuple[str, Budget]]:
        """The stage that stopped at the run's prompt-token cap, and its budget (None: none did)."""
        return next(((n, s.budget) for n, s in self.stages.items() if s.status == "stopped" and s.budget), None)

    def first_unfinished(self) -> Optional[str]:
        """The first stage, in the run's order, that started and is not done (None: none is)."""
        names = [*self.plan, *(n for n in self.stages if n not in self.plan)]
        return next((n for n in names if n in self.stages and self.stages[n].status != "done"), None)

    def record(self) -> dict[str, Any]:
        """The manifest as JSON data (what ``manifest.json`` holds; report pages read it)."""
        return self.model_dump(mode="json", exclude_none=True)

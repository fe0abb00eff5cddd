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

from pydantic import BaseModel, ConfigDict, Field, model_validator

VERSION = 3  #: this raylc's manifest format; 1: the untyped manifest of 14bd8b5 and before (no version key);
#: 2: before the ``stopped`` status and the budget record

Status = Literal["running", "done", "failed", "interrupted", "stopped"]


class Progress(BaseModel):
    """The infer stage's progress record (:class:`raylc.run.progress.InferProgress`): requests
    stored before this attempt (``reused``), to run, done so far, errors and tokens, when the
    attempt started and was last updated (epoch seconds), and ``recent``: ``(time, done)`` at its
    shards, thinned to at most 64 spread over the attempt, for the ETA."""

    model_config = ConfigDict(extra="allow")

    reused: int = Field(default=0, description="Requests stored by earlier attempts.")
    to_run: int = Field(default=0, description="Requests this attempt sends.")
    done: int = Field(default=0, description="Of those, stored so far.")
    errors: int = Field(default=0, description="Of those, failed.")
    prompt_tokens: int = Field(default=0, description="Prompt tokens of the stored requests.")
    generated_tokens: int = Field(default=0, description="Generated tokens of the stored requests.")
    started_at: float = Field(description="When the attempt started (epoch seconds).")
    updated_at: float = Field(description="When the record was last updated.")
    recent: Optional[list[tuple[float, int]]] = Field(
        default=None, description=(
        "(time, requests stored) at up to 64 shards spread over the attempt, the first and the newest kept: the "
        "time-left estimate's rate."))


class Budget(BaseModel):
    """Where a stage ``stopped`` at the run's prompt-token cap (:mod:`raylc.run.budget`): the cap,
    the prompt tokens the run has sent (``sent``, the backend's count: its stored successes and the
    failures the server answered), the requests stored and those left unsent, and raylc's count
    of the tokens these would take."""

    max_prompt_tokens: int = Field(description="The cap (`inference.max_prompt_tokens`).")
    sent: int = Field(description="Prompt tokens sent (the backend's count): the stored successes' and those "
                                  "of each failure the server answered (an empty completion, a content filter).")
    stored: int = Field(description="Requests stored (successes).")
    left: int = Field(description="Requests left unsent.")
    left_tokens: int = Field(description="raylc's count of the prompt tokens those would take.")


class StageRecord(BaseModel):
    """A stage's record: its status, its counts (``rows``, None where unknown) and wall time once
    it ended, its progress while it runs (kept when it fails, is interrupted or stops), and the
    budget it stopped at (status ``stopped``)."""

    model_config = ConfigDict(extra="allow")

    status: Status = Field(description="`running`, `done`, `failed`, `interrupted` or `stopped` (at its cap).")
    rows: Optional[dict[str, Optional[int]]] = Field(default=None, description=(
        "What the stage counted (e.g. `problems`, `spans`, `requests`, tokens), null where unknown."))
    seconds: Optional[float] = Field(default=None, description="Wall time, once it ended.")
    progress: Optional[Progress] = Field(default=None, description=(
        "The progress of the infer stage (or of a length run's judge calls in its score stage) while it runs."))
    budget: Optional[Budget] = Field(default=None, description="Where a `stopped` stage stopped at its cap.")


def _text(value: Any) -> Optional[str]:
    """A manifest's name as text for a table (None stays None; a list or number is shown as written)."""
    return None if value is None else str(value)


class Manifest(BaseModel):
    """``manifest.json``: ``job`` is the resolved job as JSON (:meth:`raylc.spec.Job.resolved`),
    so a reader needs no backend or suite to show it; ``plan`` the stages to run, in order."""

    model_config = ConfigDict(extra="allow")

    version: int = Field(default=VERSION, description="The manifest's format (no key: version 1, read as this one).")
    run_id: str = Field(description="The run's id: its folder under the store.")
    job: dict[str, Any] = Field(description="The resolved job as JSON, every default filled in.")
    fingerprint: str = Field(default="", description=(
        "A hash of what determines the results (the job without store, ray, inference and operational settings): "
        "a resumed run must match it."))
    seed: Optional[int] = Field(default=None, description="The job's seed.")
    versions: dict[str, str] = Field(default={}, description="Versions of raylc, Python and the main packages.")
    overrides: dict[str, Any] = Field(default={}, description="The command line's `--set` options.")
    plan: list[str] = Field(default=[], description="The stages to run, in order.")
    stages: dict[str, StageRecord] = Field(default={}, description="Each started stage's record, by name.")
    created_at: Optional[str] = Field(default=None, description="When the run was created (ISO 8601, UTC).")
    updated_at: Optional[str] = Field(default=None, description="When the manifest was last written.")
    finished_at: Optional[str] = Field(default=None, description="When the run's last stage ended.")

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

    @model_validator(mode="after")
    def _finished_with_stages(self) -> "Manifest":
        if self.finished_at and not self.stages:
            raise ValueError("a finished run records its stages, and this one records none")
        return self

    @property
    def job_name(self) -> Optional[str]:
        return _text(self.job.get("name"))

    @property
    def model(self) -> Optional[str]:
        """The probe's model (its backend's name when it has none); None for a probe section that
        is not a mapping (a manifest this raylc did not write)."""
        probe = self.job.get("probe")
        return _text(probe.get("model") or probe.get("backend")) if isinstance(probe, dict) else None

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

"""The job spec: one pydantic model tree, loaded from YAML with a safe loader.

A job file has ``name`` and ``seed`` and the sections ``suite``, ``sampling``, ``probe``,
``scoring``, ``fit``, ``judge``, ``inference``, ``store`` and ``ray``. Unknown keys and wrong
types are errors that name the key and list the allowed ones (:class:`JobSpecError`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Sequence, Union

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from raylc.backends.config import ProbeConfig, SimulatedProbe
from raylc.backends.registry import parse_probe, probe_config_of
from raylc.dolce.options import FitOptions
from raylc.io.errors import why_unreadable
from raylc.io.job_model import JobModel
from raylc.io.urls import ray_host_port
from raylc.suites import PlantedSuite
from raylc.suites.registry import SuiteConfig, config_of, parse_suite
from raylc.text.sampling import Sampling


class JobSpecError(ValueError):
    """A job file that cannot be loaded; the message is one line naming file and key."""


class _Strict(JobModel):
    """A section of the job (:class:`raylc.io.job_model.JobModel`); ``probe.sampling`` is
    ``generation`` in Python, and job.yaml, fingerprints and request ids keep ``sampling``."""


Probe = SerializeAsAny[Annotated[ProbeConfig, BeforeValidator(parse_probe)]]


class Scoring(_Strict):
    """Span scoring for the DOLCE suites (:func:`raylc.scoring.score_spans`): ``metric`` for
    open answers (exact match: COW outcomes 1 / 0; F1, SubEM, ROUGE-L, edit similarity: partial
    credit for PIG), accuracy of the letter for four-choice problems, ROUGE-L for summaries;
    an IDK answer is a null score. ``idk_patterns`` are regexes on the lower-cased output;
    unset means :data:`raylc.scoring.extract.IDK_PATTERNS`.
    """

    metric: Literal["exact_match", "subem", "f1", "rougeL", "rougeLsum", "edit_sim", "recall",
                    "match_part"] = Field(default="exact_match", description=(
        "The metric of open answers on DOLCE spans (exact match: outcomes 1 / 0 for COW; the others give partial "
        "credit, which the dip test may send to PIG)."))
    idk_patterns: Optional[list[str]] = Field(default=None, min_length=1, description=(
        "Regexes on the lower-cased output that mark an IDK answer (a null score); null: raylc's "
        "(`raylc/scoring/extract.py`)."))

    @field_validator("idk_patterns")
    @classmethod
    def _compiles(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        for pattern in v or []:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regex {pattern!r}: {exc}") from None
        return v


class Inference(_Strict):
    """Checkpointing and failure policy of the infer stage (row-level resume), and the run's
    prompt-token cap.
    ``max_prompt_tokens``: the run's prompt tokens (the probe's and the judge's), over all its
    attempts, stay at or under it (:mod:`raylc.run.budget`); None: no cap. Operational, like the
    whole section: a run stopped at its cap resumes with a higher one."""

    shard_rows: int = Field(default=5000, ge=1, description="A checkpoint shard is written every this many "
                                                             "completions...")
    shard_seconds: float = Field(default=30.0, gt=0.0, description="...or every this many seconds.")
    max_error_fraction: float = Field(default=0.0, ge=0.0, le=1.0, description=(
        "The share of failed requests the infer stage tolerates; above it the stage fails (failed requests are "
        "retried on resume)."))
    max_prompt_tokens: Optional[int] = Field(default=None, ge=1, strict=True, description=(
        "The run-time cap on prompt tokens (`--max-prompt-tokens`), the probe's and an LLM judge's: a stage sends, in "
        "order, each pending request whose prompt tokens still fit under it (one that does not is left out, later "
        "ones that fit are still sent) and stops once they are stored (counted by the backend's own tokenizer "
        "where it can, as vLLM does; else as `raylc plan` counts it, the backend's chat template included), and the "
        "same command with a higher cap resumes; null: no cap."))


class StoreConfig(_Strict):
    """Where stage tables go: ``<path>/<run_id>/<stage>/``."""

    path: str = Field(default="./runs", description="Where runs are stored: a folder, or `s3://bucket/prefix`.")


class RayResources(_Strict):
    """Ray resources. ``address`` (or RAY_ADDRESS) joins a cluster; else a local one starts.
    ``connect_timeout_s``: how long that cluster, or the Jobs API of ``raylc submit``, may take
    to answer before the run (or the submission) fails with one line naming the address."""

    address: Optional[str] = Field(default=None, description=(
        "The Ray cluster to join (e.g. `ray://HEAD:10001`; `auto`: RAY_ADDRESS if set, else the cluster "
        "`ray start` runs on this machine); "
        "null: RAY_ADDRESS, else a local Ray starts, even beside a running cluster."))
    num_cpus: Optional[int] = Field(default=None, ge=1, le=100_000, description=(
        "CPUs of a local Ray (null: the machine's)."))
    actors: int = Field(default=1, ge=1, description="Actors of a text backend's pool (simulated, openai).")
    actor_num_cpus: float = Field(default=0.5, gt=0.0, le=1024.0, description="Ray CPUs per such actor.")
    batch_size: int = Field(default=256, ge=1, description=(
        "Requests per Ray Data batch of the vLLM stages after the first. A request file, what a first stage takes "
        "per call and a shard stores, holds this many times the backend's block factor (vLLM 1; simulated and "
        "openai 4)."))
    no_progress_timeout_s: Optional[float] = Field(default=None, gt=0.0, description=(
        "Ray Data's no-progress timeout of the infer stream; null: Ray Data's default (1800 s), none for vLLM. "
        "Also how long the per-task Ray tasks (DOLCE fits, LongScore) may go without one finishing; null: 1800 s."))
    include_dashboard: bool = Field(default=False, description="Start Ray's dashboard with a local Ray.")
    connect_timeout_s: float = Field(default=60.0, gt=0.0, description=(
        "How long the cluster (or the Jobs API of `raylc submit`) may take to answer before the run fails in one "
        "line."))

    @field_validator("address")
    @classmethod
    def _has_a_host(cls, value: Optional[str]) -> Optional[str]:
        """``ray://`` or ``ray://:10001`` name no host: Ray's client would wait on a DNS lookup of nothing."""
        if value is not None and "://" in value and not ray_host_port(value)[0]:
            raise ValueError("no host: give host:port or ray://host:port (or auto)")
        return value

    def cluster(self) -> tuple[Optional[str], str]:
        """The cluster a run joins and where its address came from: ``address``, else RAY_ADDRESS;
        ``(None, "RAY_ADDRESS")`` when neither is set and a local Ray starts here (one that never grows)."""
        if self.address:
            return self.address, "ray.address"
        return os.environ.get("RAY_ADDRESS") or None, "RAY_ADDRESS"


class Job(_Strict):
    """A raylc job: what to build, how to sample and probe, how to score and fit.

    ``judge`` is an optional second backend config (same fields as ``probe``) for
    LLM-as-judge scoring (:mod:`raylc.scoring.judge`).
    """

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description=(
        "The job's name (letters, digits, `_`, `.`, `-`): the start of its run ids."))
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description=(  # numpy's generators: 0 <= seed < 2**32
        "The seed of everything random: the suite's draws, sampling, the simulated probe, bootstraps."))
    suite: SerializeAsAny[Annotated[SuiteConfig, BeforeValidator(parse_suite)]] = Field(
        default=PlantedSuite(), description="What to build: `kind` names the suite.")
    sampling: Sampling = Field(default=Sampling(), description="DOLCE's observation spans (DOLCE suites only).")
    probe: Probe = Field(default=SimulatedProbe(), description=(
        "The model under test: `backend` names its backend."))
    scoring: Scoring = Field(default=Scoring(), description="How DOLCE spans are scored.")
    fit: FitOptions = Field(default=FitOptions(), description="The DOLCE fit (the options of `raylc fit`).")
    judge: Optional[Probe] = Field(default=None, description=(
        "A second backend for LLM-as-judge scoring, the same fields as `probe` (100-LongBench's judged tasks)."))
    inference: Inference = Field(default=Inference(), description="Checkpointing and failures of the infer stage.")
    store: StoreConfig = Field(default=StoreConfig(), description="Where runs are written.")
    ray: RayResources = Field(default=RayResources(), description="The Ray cluster and the resources a run asks.")

    @model_validator(mode="after")
    def _judge_when_judged(self) -> "Job":
        judged = self.suite.judged_tasks()
        if judged and self.judge is None:
            raise ValueError(f"suite tasks {', '.join(judged)} are scored by an LLM judge: add a judge section")
        return self

    def resolved(self) -> dict[str, Any]:
        """The full spec with every default filled in, as plain JSON data."""
        return self.model_dump(mode="json")

    def as_judge(self) -> "Job":
        """This job with the judge as its probe, to run judge prompts through the same machinery."""
        if self.judge is None:
            raise ValueError("the job has no judge section")
        return self.model_copy(update={"probe": self.judge})

    def probe_fingerprint(self) -> str:
        """What determines a completion besides the prompt: the whole probe section and the seed
        (part of every request id, so a changed probe never reuses a stored completion)."""
        data = {"probe": probe_settings(self.probe), "seed": self.seed}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def count_tokenizer(self) -> Optional[str]:
        """The tokenizer prompts are counted with (:meth:`ProbeConfig.count_tokenizer`)."""
        return self.probe.count_tokenizer(self.suite.tokenizer_spec())

    def max_tokens(self) -> int:
        """The probe's default completion bound (:meth:`ProbeConfig.max_tokens`)."""
        return self.probe.max_tokens()

    def window(self) -> Optional[int]:
        """The probe's context window (:meth:`ProbeConfig.window`)."""
        return self.probe.window()

    def model_name(self) -> str:
        """The probe's model name for score tables (:meth:`ProbeConfig.model_name`)."""
        return self.probe.model_name()

    def fingerprint(self) -> str:
        """Hash of what determines the results (everything except store, ray, inference and
        the probes' operational settings)."""
        data = self.resolved()
        for operational in ("store", "ray", "inference"):
            data.pop(operational)
        for section in ("probe", "judge"):
            data[section] = probe_settings(getattr(self, section))
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def probe_settings(probe: Optional[BaseModel]) -> Optional[dict[str, Any]]:
    """A probe's settings that determine its completions, as JSON data (without its
    ``OPERATIONAL`` fields, which only change how fast requests run)."""
    if probe is None:
        return None
    return probe.model_dump(mode="json", exclude=set(getattr(probe, "OPERATIONAL", ())))


def _members(annotation: Any) -> list[type[BaseModel]]:
    """The model classes inside an annotation (unions, Optional, list, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (Union, types.UnionType, list, typing.Annotated):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return []


def _fields_by_key(model: type[BaseModel]) -> dict[str, Any]:
    """A model's fields by every key a job file may give them: the name and its validation aliases."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        alias = field.validation_alias
        keys = alias.choices if isinstance(alias, AliasChoices) else [alias] if isinstance(alias, str) else []
        out.update({str(key): field for key in [name, *keys]})
    return out


def _written_keys(model: type[BaseModel]) -> list[str]:
    """A model's keys as a job file writes them (a renamed field under its serialization alias)."""
    return [field.serialization_alias or name for name, field in model.model_fields.items()]


def _walk(loc: tuple[Any, ...], data: Any = None) -> tuple[Optional[type[BaseModel]], list[str]]:
    """Follow ``loc`` through the model tree: (model holding the last key, key path). ``data``
    (the raw job) names the config model of a registry-backed field (``suite``, ``probe``, ``judge``)."""
    models: list[type[BaseModel]] = [Job]
    path: list[str] = []
    for part in loc:
        data = data.get(part) if isinstance(data, dict) and isinstance(part, str) else (
            data[part] if isinstance(data, list) and isinstance(part, int) and part < len(data) else None)
        if isinstance(part, int):
            path.append(str(part))
            continue
        holder = next((m for m in models if part in _fields_by_key(m)), None)
        path.append(str(part))
        if holder is None:
            return None, path
        models = _members(_fields_by_key(holder)[part].annotation)
        if models in ([SuiteConfig], [ProbeConfig]):  # a registry decides which config the section is
            config = config_of(data) if models == [SuiteConfig] else probe_config_of(data)
            models = [config] if config is not None else models
    return (models[0] if len(models) == 1 else None), path


def _got(value: Any, limit: int = 200) -> str:
    """A value as an error line shows it: its repr, cut at ``limit`` characters; an integer past
    Python's 4,300 digits by its length."""
    try:
        text = repr(value)
    except ValueError:
        return f"a number of about {int(value.bit_length() * 0.30103):,} digits"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _describe(err: dict[str, Any], data: Any = None) -> str:
    loc = tuple(err["loc"])
    parent = _walk(loc[:-1], data)[0] if loc else Job
    _, path = _walk(loc, data)
    key = ".".join(path) or "(top level)"
    if err["type"] == "extra_forbidden":
        allowed = ", ".join(_written_keys(parent)) if parent else "?"
        return f"unknown key '{key}' (allowed: {allowed})"
    if err["type"] == "missing":
        return f"missing key '{key}'"
    if err["type"] == "suite_kind":
        return f"key '{key}.kind': {err['msg']}"
    if err["type"] == "probe_backend":
        return f"key '{key}.backend': {err['msg']}"
    if err["type"] == "probe_backend_missing":
        return f"missing key '{key}.backend' ({err['msg']})"
    message = str(err["msg"]).removeprefix("Value error, ")  # pydantic's prefix to a validator's own message
    if not loc:  # a check across sections
        return message
    return f"key '{key}': {message} (got {_got(err.get('input'))})"


def parse_job(data: Any, source: str = "<job>") -> Job:
    """Validate already-parsed YAML data into a :class:`Job`."""
    if not isinstance(data, dict):
        raise JobSpecError(f"{source}: the job file must be a YAML mapping of sections "
                           f"(allowed: {', '.join(Job.model_fields)})")
    try:
        return Job.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise JobSpecError(f"{source}: {_describe(errors[0], data)}{more}") from None


class DuplicateKey(yaml.YAMLError):
    """A mapping of the job file gives one key twice (YAML would keep the last silently)."""

    def __init__(self, key: str, first: int, again: int):
        super().__init__(f"key '{key}' is given twice (lines {first} and {again})")
        self.key, self.first, self.again = key, first, again


class _JobLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (:class:`DuplicateKey`,
    with the dotted key and both line numbers); merge keys (``<<``) may still be overridden."""

    def construct_document(self, node: yaml.Node) -> Any:
        self._check_keys(node, [], set())
        return super().construct_document(node)

    def _check_keys(self, node: yaml.Node, path: list[str], seen: set[int]) -> None:
        if id(node) in seen:  # an alias of a node already checked
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
                if key is not None and key in lines:
                    raise DuplicateKey(".".join([*path, key]), lines[key], key_node.start_mark.line + 1)
                if key is not None:
                    lines[key] = key_node.start_mark.line + 1
                self._check_keys(value_node, [*path, key if key is not None else "?"], seen)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._check_keys(item, [*path, str(i)], seen)


_KEY_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _shown(value: Any) -> str:
    """An override's value as the error line shows it: as given, or quoted (repr) when it holds
    a line break or another character that is not printable (the error stays one line)."""
    try:
        text = str(value)
    except ValueError:  # an integer past Python's 4,300 digits
        return _got(value)
    return text if text.isprintable() else _got(value)


def parse_overrides(settings: Sequence[str]) -> dict[str, Any]:
    """``--set key.path=value`` options as :func:`load_job` overrides; each value is read as
    YAML (``3``, ``0.5``, ``true``, ``null``, ``[1024, 2048]``, ``{a: 1}``, else a string).
    JobSpecError naming the option when one is malformed."""
    out: dict[str, Any] = {}
    for setting in settings:
        key, sep, raw = setting.partition("=")
        key = key.strip()
        if not sep or not _KEY_PATH.fullmatch(key):
            raise JobSpecError(f"--set {setting!r}: expected key.path=value (e.g. --set seed=3)")
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise JobSpecError(f"--set {setting!r}: the value is not valid YAML ({str(exc).splitlines()[0]})") from None
        except (ValueError, RecursionError) as exc:
            raise JobSpecError(f"--set {_got(setting, 60)}: unreadable value ({why_unreadable(exc)})") from None
    return out


def _overridden(data: dict, overrides: dict[str, Any], path: str | Path) -> dict:
    """``data`` with each dotted key of ``overrides`` set (in place)."""
    for dotted, value in overrides.items():
        node = data
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise JobSpecError(f"--set {dotted}=...: '{part}' is not a mapping in {path}")
        node[last] = value
    return data


def load_job(path: str | Path, overrides: Optional[dict[str, Any]] = None) -> Job:
    """Load and validate a job file; ``overrides`` are dotted keys (``store.path``) to set."""
    p = Path(path)
    if not p.is_file():
        raise JobSpecError(f"{path}: job file not found")
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=_JobLoader)  # noqa: S506 (a SafeLoader)
    except DuplicateKey as exc:
        raise JobSpecError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise JobSpecError(f"{path}: invalid YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise JobSpecError(f"{path}: not a UTF-8 text file") from None
    except (ValueError, RecursionError) as exc:  # an integer past Python's 4,300 digits, nesting
        raise JobSpecError(f"{path}: unreadable YAML ({why_unreadable(exc)})") from None
    as_written = copy.deepcopy(data)
    if isinstance(data, dict) and overrides:
        data = _overridden(data, overrides, path)
    try:
        job = parse_job(data, str(path))
    except JobSpecError:
        if not overrides:
            raise
        parse_job(as_written, str(path))  # the file alone is wrong: blame the file
        def fails(key: str) -> bool:
            try:
                parse_job(_overridden(copy.deepcopy(as_written), {key: overrides[key]}, path))
            except JobSpecError:
                return True
            return False
        blamed = [k for k in overrides if fails(k)] or list(overrides)  # else only their combination fails
        sets = " ".join(f"--set {k}={_shown(overrides[k])}" for k in blamed)
        job = parse_job(data, sets)  # raises, naming the options
    job.suite._job_dir = str(p.parent)  # relative data paths (SuiteConfig.data_path), as the user wrote the job path
    return job

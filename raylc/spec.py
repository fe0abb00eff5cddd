"""The job spec: one pydantic model tree, loaded from YAML with a safe loader.

A job file has the sections ``suite``, ``sampling``, ``probe``, ``scoring``, ``fit``,
``store`` and ``ray``. Unknown keys and wrong types are errors that name the key and
list the allowed ones (:class:`JobSpecError`).
"""

from __future__ import annotations

import hashlib
import json
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class JobSpecError(ValueError):
    """A job file that cannot be loaded; the message is one line naming file and key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Length = Union[int, Literal["L"]]


class PlantedSuite(_Strict):
    """Synthetic suite with planted evidence of known complexity lambda and redundancy k.

    Each problem's context is ``L`` filler sentences (units); ``k`` non-overlapping runs of
    ``lambda`` consecutive clue sentences are hidden in it, and the answer can only be
    derived from one complete run. ``"L"`` in ``lambdas`` means lambda = L (the whole
    context is one run of clues, k = 1).
    """

    kind: Literal["planted"] = "planted"
    tasks: list[str] = Field(default=["planted-a", "planted-b"], min_length=1)
    problems_per_task: int = Field(default=100, ge=1)
    lambdas: list[Length] = Field(default=[1, 2, 5, 10, 20, 50, "L"], min_length=1)
    ks: list[int] = Field(default=[1, 2, 5, 10], min_length=1)
    min_units: int = Field(default=50, ge=2)
    max_units: int = Field(default=400, ge=2)

    @field_validator("lambdas")
    @classmethod
    def _positive_lambdas(cls, v: list[Length]) -> list[Length]:
        if any(isinstance(x, int) and x < 1 for x in v):
            raise ValueError("every lambda must be >= 1 or 'L'")
        return v

    @field_validator("ks")
    @classmethod
    def _positive_ks(cls, v: list[int]) -> list[int]:
        if any(x < 1 for x in v):
            raise ValueError("every k must be >= 1")
        return v

    @field_validator("tasks")
    @classmethod
    def _task_names(cls, v: list[str]) -> list[str]:
        """Each task names a folder (raylc/names.py) and problem ids; a task listed twice would
        give two problems one id."""
        from raylc.names import UnsafeName, path_segment

        try:
            v = [path_segment(t, "task") for t in v]
        except UnsafeName as exc:
            raise ValueError(str(exc)) from None
        twice = sorted({t for t in v if v.count(t) > 1})
        if twice:
            raise ValueError(f"task {twice[0]!r} is listed twice")
        return v

    @model_validator(mode="after")
    def _units_range(self) -> "PlantedSuite":
        if self.min_units > self.max_units:
            raise ValueError("min_units must be <= max_units")
        return self


LENGTHS_DEFAULT = [2048, 4096, 6144, 8192, 16384, 32768, 65536, 131072, 262144]


def _check_axis(axis: list[int], base: list[int], name: str, base_name: str, smallest: int) -> None:
    """Every value of a length axis is >= ``smallest`` and LongScore's base values lie on it."""
    if any(x < smallest for x in axis):
        raise ValueError(f"every value of {name} must be >= {smallest}")
    missing = sorted(set(base) - set(axis))
    if missing:
        raise ValueError(f"{base_name} {missing} are not in {name}")


class _LengthSuite(_Strict):
    """Shared fields of the length-controlled suites (100-LongBench Section 3, HELMET):
    every sample is rebuilt at each target length in ``lengths`` (tokens of the context,
    counted with ``tokenizer``: None = the offline default, ``hf:<name>`` a real one);
    LongScore's Base is the mean over ``base_lengths`` (must be a subset of ``lengths``)."""

    lengths: list[int] = Field(default=LENGTHS_DEFAULT, min_length=1)
    base_lengths: list[int] = Field(default=[2048, 4096, 6144], min_length=1)
    samples_per_length: int = Field(default=100, ge=1)
    tokenizer: Optional[str] = None

    @model_validator(mode="after")
    def _base_in_lengths(self):
        _check_axis(self.lengths, self.base_lengths, "lengths", "base_lengths", 1)
        return self


LONGBENCH100_TASKS = ("kv_retrieval", "counting_stars", "passage_retrieval", "passage_count",
                      "single_doc_qa", "multi_doc_qa", "single_doc_sum", "multi_doc_sum")


LONGBENCH100_JUDGED = ("single_doc_qa", "multi_doc_qa", "single_doc_sum", "multi_doc_sum")


class LongBench100Suite(_LengthSuite):
    """The eight length-controllable tasks of 100-LongBench (Appendix A.2), built from a pool of
    real source documents (``sources``) and a pool of distractor documents (``distractors``),
    JSONL/Parquet/CSV, local or s3://. QA samples scoring above ``prior_knowledge_threshold``
    with no context are dropped from the statistics (null disables the filter, and the
    no-context rows are then not built). Appendix A.2 settings: ``kv_pairs`` chained UUID pairs
    (KV Retrieval), ``star_passages`` star-count sentences (Counting Stars), each Passage Count
    document repeated 1..``max_repeats`` times."""

    kind: Literal["longbench100"]
    tasks: list[Literal[LONGBENCH100_TASKS]] = Field(default=list(LONGBENCH100_TASKS), min_length=1)  # type: ignore[valid-type]
    sources: str = Field(min_length=1)
    distractors: str = Field(min_length=1)
    prior_knowledge_threshold: Optional[float] = Field(default=0.5, ge=0.0, le=1.0)
    kv_pairs: int = Field(default=3, ge=1)
    star_passages: int = Field(default=4, ge=2)
    max_repeats: int = Field(default=3, ge=1)


HELMET_RECALL_TASKS = ("json_kv", "mk_needle_number", "mk_needle_uuid", "mv_needle")


class HelmetRecallSuite(_LengthSuite):
    """HELMET's synthetic recall tasks (Section 2.1, Appendix B.5): JSON KV, RULER multi-key
    needle with number / UUID values (the haystack is noisy needles with other keys) and
    multi-value needle (four values for one key in an essay haystack), SubEM-scored (recall
    over the four values for the multi-value needle); the gold key or needle sits at
    ``depths`` evenly spaced depths across samples. ``haystack`` optionally names a document
    pool (JSONL/Parquet/CSV with a ``text`` column, local or s3://) for the multi-value
    needle's essay; unset, RULER's repeated noise sentences are the filler."""

    kind: Literal["helmet_recall"]
    tasks: list[Literal[HELMET_RECALL_TASKS]] = Field(default=list(HELMET_RECALL_TASKS), min_length=1)  # type: ignore[valid-type]
    depths: int = Field(default=6, ge=1)
    haystack: Optional[str] = None


class LongBenchV2Suite(_Strict):
    """A LongBench v2 run on data in its released JSON/JSONL format (``data``), zero-shot or
    two-call chain of thought (Appendix C); contexts are truncated from the middle to the
    probe's window; invalid outputs count 0.25 in the compensated score."""

    kind: Literal["longbench_v2"]
    data: str = Field(min_length=1)
    mode: Literal["zero_shot", "cot"] = "zero_shot"
    tokenizer: Optional[str] = None


THESIS_TASKS = ("key_retrieval", "filter", "exclusion")


class ThesisSuite(_Strict):
    """Unit tasks of the long-context prediction thesis (Section 3.2, Table A.1): key retrieval,
    filter by predicates and information exclusion over generated candidate pieces.

    A piece is one candidate with its context sentences; ``pieces`` are the piece counts (the
    length axis: the thesis adjusts context length by the number of pieces) and LongScore's
    Base is the mean over ``base_pieces`` (a subset of ``pieces``). The samples table's
    ``length`` is a token count (the largest context of the task and piece count) and the
    piece count is its ``n_pieces`` column. ``selectivity`` is the fraction of candidates that
    satisfy every predicate (Section 5.2), ``exclusion`` the fraction the exclusion task tells
    the model to ignore (Section 5.3; the thesis ignores 2 of 20)."""

    kind: Literal["thesis_units"]
    tasks: list[Literal[THESIS_TASKS]] = Field(default=list(THESIS_TASKS), min_length=1)  # type: ignore[valid-type]
    pieces: list[int] = Field(default=[16, 64, 256, 1024], min_length=1)
    base_pieces: list[int] = Field(default=[16], min_length=1)
    samples_per_setting: int = Field(default=50, ge=1)
    selectivity: float = Field(default=0.2, ge=0.0, le=1.0)
    exclusion: float = Field(default=0.1, ge=0.0, le=1.0)
    tokenizer: Optional[str] = None

    @model_validator(mode="after")
    def _base_in_pieces(self) -> "ThesisSuite":
        _check_axis(self.pieces, self.base_pieces, "pieces", "base_pieces", 2)
        return self


class DocumentsSuite(_Strict):
    """User-provided problems for the DOLCE pipeline (:mod:`raylc.suites.documents`): a
    JSONL/Parquet/CSV file (``data``, local or s3://) with fields ``task, id, context, question,
    answer`` (or ``answers``) and optional ``choices``. Contexts are split into units by
    ``units`` (DOLCE Table 3 letters, e.g. ``ls``), per task by ``task_units``; prompts use
    ``template`` (a name in :data:`raylc.prompts.TEMPLATES`, or ``auto``: ``choice`` for rows
    with choices, else ``qa``), per task ``task_templates``. ``tasks`` keeps only those tasks;
    ``problems_per_task`` keeps a seeded sample of that many problems per task."""

    kind: Literal["documents"]
    data: str = Field(min_length=1)
    units: str = "s"
    task_units: dict[str, str] = {}
    template: str = "auto"
    task_templates: dict[str, str] = {}
    tasks: Optional[list[str]] = Field(default=None, min_length=1)
    problems_per_task: Optional[int] = Field(default=None, ge=1)

    @field_validator("units")
    @classmethod
    def _unit_spec(cls, v: str) -> str:
        from raylc.units import parse_spec

        return parse_spec(v)

    @field_validator("task_units")
    @classmethod
    def _task_unit_specs(cls, v: dict[str, str]) -> dict[str, str]:
        from raylc.units import parse_spec

        return {task: parse_spec(spec) for task, spec in v.items()}

    @field_validator("template")
    @classmethod
    def _template(cls, v: str) -> str:
        from raylc.prompts import check_template

        return check_template(v, auto=True)

    @field_validator("task_templates")
    @classmethod
    def _task_templates(cls, v: dict[str, str]) -> dict[str, str]:
        from raylc.prompts import check_template

        return {task: check_template(name, auto=True) for task, name in v.items()}


Suite = Annotated[
    Union[PlantedSuite, LongBench100Suite, HelmetRecallSuite, LongBenchV2Suite, ThesisSuite, DocumentsSuite],
    Field(discriminator="kind"),
]
LENGTH_SUITES = ("longbench100", "helmet_recall", "longbench_v2", "thesis_units")


class Sampling(_Strict):
    """Observation spans (DOLCE Section 3.1) and the sampling strategies of Appendix K.1.

    ``lengths`` is ``"exponential"`` (0, 1, 2, 5, 10, 20, 50, 100, ... below L, plus L) or an
    explicit list where ``"L"`` is the full context; ``min_length`` / ``max_length`` keep only
    partial lengths in that range ("only >= 10", "only <= 10"; C = 0 and C = L are kept).
    Strategies over each length's candidate starts 0, 1, ..., L - C:

    - ``enumerate``: every start;
    - ``take_every``: starts 0, s, 2s, ... with s = max(every, floor(stride_fraction * C));
      ``every`` is one stride or a mapping ``{C: stride}`` of per-length strides (lengths it
      does not list use 1), as written by ``raylc plan --budget-tokens`` (:mod:`raylc.plan`);
    - ``take_ip_rate``: the same with s = max(1, floor(stride_fraction * C)), a take rate
      inversely proportional to C (``stride_fraction`` > 0 required);
    - ``sample_rate``: each start kept with probability ``rate``;
    - ``sample_ip_rate``: each start kept with probability min(1, ``rate`` / C).

    Random strategies draw from a hash of (job seed, problem, C, start), so a span's fate
    does not depend on the other spans or on the row order. The single C = 0 and C = L
    spans are always kept.
    """

    lengths: Union[Literal["exponential"], list[Length]] = "exponential"
    strategy: Literal["take_every", "enumerate", "take_ip_rate", "sample_rate", "sample_ip_rate"] = "take_every"
    every: Union[int, dict[int, int]] = 1
    stride_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    rate: float = Field(default=1.0, gt=0.0)
    min_length: int = Field(default=0, ge=0)
    max_length: Optional[int] = Field(default=None, ge=0)

    @field_validator("every", mode="before")
    @classmethod
    def _every_strides(cls, v: Any) -> Union[int, dict[int, int]]:
        """One stride >= 1, or ``{C: stride}`` with lengths >= 0 and strides >= 1 (sorted by C)."""
        def whole(x: Any) -> int:
            if isinstance(x, float) and not x.is_integer():
                raise ValueError(x)
            return int(x)

        try:
            every = {whole(c): whole(s) for c, s in v.items()} if isinstance(v, dict) else whole(v)
            bad = every < 1 if isinstance(every, int) else any(c < 0 or s < 1 for c, s in every.items())
        except (TypeError, ValueError):
            bad = True
        if bad:
            raise ValueError("every must be a stride >= 1 or a mapping {length >= 0: stride >= 1}")
        return dict(sorted(every.items())) if isinstance(every, dict) else every

    @model_validator(mode="after")
    def _strategy_params(self) -> "Sampling":
        if self.strategy == "take_ip_rate" and self.stride_fraction <= 0:
            raise ValueError("strategy take_ip_rate needs stride_fraction > 0")
        if self.strategy == "sample_rate" and self.rate > 1:
            raise ValueError("strategy sample_rate needs rate <= 1")
        return self


class SimulatedProbe(_Strict):
    """The simulated probe: a deterministic program that reads the prompt.

    It exists to validate the pipeline and the estimator, never as a stand-in for a real
    model. Per request, seeded from the prompt text: with ``knowledge_rate`` it answers
    correctly closed-book; otherwise it answers correctly iff a complete evidence run is
    visible (missing it with ``idk_rate``); without one it guesses a random code with
    ``guess_rate``, gives a plausible wrong answer with ``wrong_rate``, else "Unanswerable".

    On the length-controlled suites it answers a sample's gold answer with probability
    ``accuracy * 2 ** (-context_tokens / half_life_tokens)`` (``knowledge_rate`` with no
    context), else "Unanswerable"; a chain-of-thought first call gets a fixed reasoning line.
    """

    backend: Literal["simulated"] = "simulated"
    knowledge_rate: float = Field(default=0.003, ge=0.0, le=1.0)
    guess_rate: float = Field(default=0.005, ge=0.0, le=1.0)
    wrong_rate: float = Field(default=0.002, ge=0.0, le=1.0)
    idk_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    accuracy: float = Field(default=0.9, ge=0.0, le=1.0)
    half_life_tokens: int = Field(default=65536, ge=1)

    @model_validator(mode="after")
    def _rates(self) -> "SimulatedProbe":
        if self.guess_rate + self.wrong_rate > 1.0:
            raise ValueError("guess_rate + wrong_rate must be <= 1")
        return self


class GenerationParams(_Strict):
    """Sampling parameters sent to a real backend (vLLM ``SamplingParams`` / OpenAI request)."""

    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(default=32, ge=1)
    stop: list[str] = []
    seed: Optional[int] = None


Truncation = Literal["middle", "end", "start", "refuse"]


class VLLMProbe(_Strict):
    """vLLM offline engine in a Ray Data actor pool (one engine per replica, ``tensor_parallel_size`` GPUs each).

    ``truncation`` fits prompt + ``sampling.max_tokens`` into ``max_model_len`` by cutting the
    context only: ``middle`` (LongBench), ``end`` (HELMET), ``start``, or ``refuse`` (record an error).

    Operational settings (:data:`OPERATIONAL`: they change how fast, not what is generated, so
    a run can resume with other values): ``replicas`` engine actors; ``max_concurrent_batches``
    batches in flight per engine (vLLM's async engine interleaves their requests);
    ``max_engine_restarts`` restarts of an actor whose engine died; ``prepare_actors`` CPU
    actors that render, fit and tokenize prompts for the engines.
    """

    OPERATIONAL: ClassVar[tuple[str, ...]] = (
        "replicas", "max_concurrent_batches", "max_engine_restarts", "prepare_actors", "accelerator_type", "hf_config")

    backend: Literal["vllm"]
    model: str = Field(min_length=1)
    tokenizer: Optional[str] = None
    max_model_len: int = Field(default=131072, ge=1)
    tensor_parallel_size: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1)
    max_num_seqs: Optional[int] = Field(default=None, ge=1)
    max_concurrent_batches: int = Field(default=4, ge=1)
    max_engine_restarts: int = Field(default=3, ge=0)
    prepare_actors: int = Field(default=1, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    max_num_batched_tokens: Optional[int] = Field(default=None, ge=1)
    dtype: str = "auto"
    hf_overrides: dict[str, Any] = {}
    chat_template: bool = True
    sampling: GenerationParams = GenerationParams()
    truncation: Truncation = "middle"
    #: the model's config.json (or a folder holding one) for ``raylc check``'s preflight, offline
    hf_config: Optional[str] = None
    #: Ray accelerator type of the engines' GPUs (e.g. H100, A100-80G, L4); sizes the preflight's memory estimate
    accelerator_type: Optional[str] = None


class OpenAIProbe(_Strict):
    """Any OpenAI-compatible endpoint (e.g. ``vllm serve``). The API key is read from the
    environment variable named by ``api_key_env``; the key itself is never stored.

    ``empty_ok``: a reply whose content is null or empty (e.g. ``finish_reason:
    content_filter``) is a valid answer; by default it is an error row, retried on resume.
    Operational settings (:data:`OPERATIONAL`, not part of the fingerprint): ``concurrency``,
    ``max_retries``, ``backoff_s``, ``timeout_s``; ``check_model: false`` skips the check that
    ``/models`` lists ``model`` (servers that route names they do not list, e.g. LiteLLM's
    ``local/*``); ``usage_check_factor``: warn once per worker when the server's prompt token
    count and raylc's own differ by more than this factor (null: never).
    """

    OPERATIONAL: ClassVar[tuple[str, ...]] = (
        "concurrency", "max_retries", "backoff_s", "timeout_s", "check_model", "usage_check_factor")

    backend: Literal["openai"]
    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    api_key_env: Optional[str] = None
    mode: Literal["chat", "completions"] = "chat"
    concurrency: int = Field(default=8, ge=1)
    max_retries: int = Field(default=5, ge=0)
    backoff_s: float = Field(default=1.0, ge=0.0)
    timeout_s: float = Field(default=120.0, gt=0.0)
    tokenizer: Optional[str] = None
    max_model_len: Optional[int] = Field(default=None, ge=1)
    sampling: GenerationParams = GenerationParams()
    truncation: Truncation = "middle"
    empty_ok: bool = False
    check_model: bool = True
    usage_check_factor: Optional[float] = Field(default=4.0, gt=1.0)


Probe = Annotated[Union[SimulatedProbe, VLLMProbe, OpenAIProbe], Field(discriminator="backend")]


class Scoring(_Strict):
    """Span scoring for the DOLCE suites (:func:`raylc.scoring.score_spans`): ``metric`` for
    open answers (exact match: COW outcomes 1 / 0; F1, SubEM, ROUGE-L, edit similarity: partial
    credit for PIG), accuracy of the letter for four-choice problems, ROUGE-L for summaries;
    an IDK answer is a null score. ``idk_patterns`` are regexes on the lower-cased output;
    unset means :data:`raylc.scoring.extract.IDK_PATTERNS`.
    """

    metric: Literal["exact_match", "subem", "f1", "rougeL", "rougeLsum", "edit_sim", "recall", "match_part"] = "exact_match"
    idk_patterns: Optional[list[str]] = Field(default=None, min_length=1)

    @field_validator("idk_patterns")
    @classmethod
    def _compiles(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        for pattern in v or []:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regex {pattern!r}: {exc}") from None
        return v


class Fit(_Strict):
    """DOLCE fit settings (Sections 3.1-3.4, Algorithms 1-2).

    ``scenario``: ``auto`` picks COW or PIG per problem by Hartigan's dip test (Section 3.1,
    Appendix H; accuracy-scored problems are COW); ``cow`` / ``pig`` force one.
    ``threshold`` binarizes continuous scores for COW. ``em_steps_cow`` / ``em_steps_pig``:
    the paper's 10 / 5 by default. ``pig_likelihood`` / ``pig_hit_rate``: options of
    :class:`raylc.dolce.pig.PIGFit`, off by default (``hit_rate`` / ``mode`` = Algorithm 2).
    """

    scenario: Literal["auto", "cow", "pig"] = "auto"
    em_steps_cow: int = Field(default=10, ge=1)
    em_steps_pig: int = Field(default=5, ge=1)
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    pig_likelihood: Literal["hit_rate", "score", "binned"] = "hit_rate"
    pig_hit_rate: Literal["mode", "mean"] = "mode"


class Inference(_Strict):
    """Checkpointing and failure policy of the infer stage (row-level resume)."""

    shard_rows: int = Field(default=5000, ge=1)
    shard_seconds: float = Field(default=30.0, gt=0.0)
    max_error_fraction: float = Field(default=0.0, ge=0.0, le=1.0)


class Store(_Strict):
    """Where stage tables go: ``<path>/<run_id>/<stage>/``."""

    path: str = "./runs"


class RayResources(_Strict):
    """Ray resources. ``address`` (or RAY_ADDRESS) joins a cluster; else a local one starts.
    ``connect_timeout_s``: how long that cluster, or the Jobs API of ``raylc submit``, may take
    to answer before the run (or the submission) fails with one line naming the address."""

    address: Optional[str] = None
    num_cpus: Optional[int] = Field(default=None, ge=1)
    actors: int = Field(default=1, ge=1)
    actor_num_cpus: float = Field(default=0.5, gt=0.0)
    batch_size: int = Field(default=256, ge=1)
    no_progress_timeout_s: Optional[float] = Field(default=None, gt=0.0)
    include_dashboard: bool = False
    connect_timeout_s: float = Field(default=60.0, gt=0.0)


class Job(_Strict):
    """A raylc job: what to build, how to sample and probe, how to score and fit.

    ``judge`` is an optional second backend config (same fields as ``probe``) for
    LLM-as-judge scoring (:mod:`raylc.scoring.judge`).
    """

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = Field(default=0, ge=0)  # numpy's generators take non-negative seeds
    suite: Suite = PlantedSuite()
    sampling: Sampling = Sampling()
    probe: Probe = SimulatedProbe()
    scoring: Scoring = Scoring()
    fit: Fit = Fit()
    judge: Optional[Probe] = None
    inference: Inference = Inference()
    store: Store = Store()
    ray: RayResources = RayResources()

    @model_validator(mode="after")
    def _judge_when_judged(self) -> "Job":
        judged = sorted(set(getattr(self.suite, "tasks", [])) & set(LONGBENCH100_JUDGED)) if self.suite.kind == "longbench100" else []
        if judged and self.judge is None:
            raise ValueError(f"suite tasks {', '.join(judged)} are scored by an LLM judge: add a judge section")
        return self

    @model_validator(mode="before")
    @classmethod
    def _planted_by_default(cls, data: Any) -> Any:
        """A ``suite`` mapping without ``kind`` is the planted suite (the foundation's job files)."""
        if isinstance(data, dict) and isinstance(data.get("suite"), dict) and "kind" not in data["suite"]:
            data = {**data, "suite": {"kind": "planted", **data["suite"]}}
        return data

    def resolved(self) -> dict[str, Any]:
        """The full spec with every default filled in, as plain JSON data."""
        return self.model_dump(mode="json")

    def as_judge(self) -> "Job":
        """This job with the judge as its probe, to run judge prompts through the same machinery."""
        if self.judge is None:
            raise ValueError("the job has no judge section")
        return self.model_copy(update={"probe": self.judge})

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


def _tag_of(model: type[BaseModel]) -> Optional[str]:
    field = model.model_fields.get("backend") or model.model_fields.get("kind")
    return field.default if field is not None and isinstance(field.default, str) else (
        typing.get_args(field.annotation)[0] if field is not None and typing.get_args(field.annotation) else None
    )


def _walk(loc: tuple[Any, ...]) -> tuple[Optional[type[BaseModel]], list[str]]:
    """Follow ``loc`` through the model tree: (model holding the last key, key path without union tags)."""
    models: list[type[BaseModel]] = [Job]
    path: list[str] = []
    for part in loc:
        if isinstance(part, int):
            path.append(str(part))
            continue
        if len(models) > 1:  # a discriminated union: this part is the tag
            tagged = [m for m in models if _tag_of(m) == part]
            if tagged:
                models = tagged
                continue
        holder = next((m for m in models if part in m.model_fields), None)
        path.append(str(part))
        if holder is None:
            return None, path
        models = _members(holder.model_fields[part].annotation)
    return (models[0] if len(models) == 1 else None), path


def _describe(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])
    parent, parent_path = _walk(loc[:-1]) if loc else (Job, [])
    _, path = _walk(loc)
    key = ".".join(path) or "(top level)"
    if err["type"] == "extra_forbidden":
        allowed = ", ".join(parent.model_fields) if parent else "?"
        return f"unknown key '{key}' (allowed: {allowed})"
    if err["type"] == "missing":
        return f"missing key '{key}'"
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        holder = _walk(loc[:-1])[0] if loc else Job
        field = holder.model_fields.get(str(loc[-1])) if holder is not None and loc else None
        tags = [t for t in (_tag_of(m) for m in _members(field.annotation))] if field is not None else []
        expected = ", ".join(f"'{t}'" for t in tags) or err.get("ctx", {}).get("expected_tags", "")
        tag = err.get("ctx", {}).get("discriminator", "'backend'").strip("'")
        got = err.get("ctx", {}).get("tag")
        return f"key '{key}.{tag}': {got!r} is not one of {expected}" if got is not None else f"missing key '{key}.{tag}' (one of {expected})"
    if not loc:  # a check across sections
        return str(err["msg"]).removeprefix("Value error, ")
    return f"key '{key}': {err['msg']} (got {err.get('input')!r})"


def parse_job(data: Any, source: str = "<job>") -> Job:
    """Validate already-parsed YAML data into a :class:`Job`."""
    if not isinstance(data, dict):
        raise JobSpecError(f"{source}: the job file must be a YAML mapping of sections (allowed: {', '.join(Job.model_fields)})")
    try:
        return Job.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise JobSpecError(f"{source}: {_describe(errors[0])}{more}") from None


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
    if isinstance(data, dict) and overrides:
        for dotted, value in overrides.items():
            node = data
            *parents, last = dotted.split(".")
            for part in parents:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise JobSpecError(f"{path}: key '{part}' must be a mapping to override '{dotted}'")
            node[last] = value
    return parse_job(data, str(path))

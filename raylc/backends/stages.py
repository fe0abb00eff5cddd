"""A backend's pipeline stages, and the plain functions they are made of (Polars frames in and out, no Ray).

A backend's plug-in (:meth:`raylc.backends.registry.BackendPlugin.stages`) gives its pipeline as a
list of :class:`PipelineStage`, the way ray.data.llm's ``StatefulStage`` gives one: the stage's
function and its ``map_batches`` settings. The run layer (:mod:`raylc.run.pipeline`) maps each
over a Ray Data actor pool; ``tests/in_process.py`` runs the same stages in one process.

The built-in shapes: :func:`text_pipeline` (one stage: render the prompts, generate with a text
backend such as the simulated probe or an OpenAI-compatible endpoint), and a token engine's
two (vLLM, :mod:`raylc.backends.builtin`): :class:`PrepareStage` (render, fit into the window,
tokenize with the engine's tokenizer) and :class:`EngineStage` (generate from token ids).

A request row carries its prompt inline (``head, context, tail``: the length-controlled
suites, judge calls) or as a reference to a DOLCE span (``problem_id, C, start``), which
:func:`render` renders from the problem's units (:func:`raylc.text.prompts.render_prompt_parts`),
loading only the problems its batch names (:class:`ProblemSource`): no actor holds the suite.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

import polars as pl
import pyarrow.parquet as pq

from raylc.backends.base import PROMPT_PARTS, BackendUnavailable
from raylc.text.prompts import render_prompt_parts
from raylc.text.tokenize import HFTokenizer
from raylc.text.truncation import PromptTooLong, fit_to_window

if TYPE_CHECKING:
    from raylc.backends.base import Backend
    from raylc.spec import Job

INLINE = PROMPT_PARTS
#: the columns :func:`tokenize` adds for the engine stage (they do not travel to the completion row)
TOKENIZED_COLUMNS = ("prompt_token_ids", "prompt_tokens", "truncated_tokens", "error")
PROBLEM_ROW_GROUP = 8  # problems per Parquet row group of build/problems.parquet: the unit a prepare actor reads


@dataclass(frozen=True)
class PipelineStage:
    """One step of a backend's pipeline (ray.data.llm's ``StatefulStage``): ``fn(job, inputs)``
    builds the stage's function once per actor (a picklable class or ``functools.partial``);
    called with a frame of rows it returns the next stage's rows (an ``async`` call for a stage
    with ``concurrent_batches``), and its ``close()``, if any, runs when the actor ends.

    Its ``map_batches`` settings: ``actors`` in the pool, each with ``num_cpus`` CPUs and the
    Ray actor ``options`` (``num_gpus``, ``accelerator_type``, ``runtime_env``); ``batch_size``
    rows a call (None: one request file, for the first stage); ``concurrent_batches`` calls in
    flight per actor. ``max_restarts``: deaths of the stage's engine (:class:`EngineDead`) that a
    stream survives, each ending its actor for Ray to restart (``restarts_key`` names the job
    field in the error, ``label`` the engine)."""

    name: str
    fn: Callable[[Job, StageInputs], Any]
    actors: int = 1
    num_cpus: float = 0.5
    batch_size: Optional[int] = None
    concurrent_batches: Optional[int] = None
    options: Mapping[str, Any] = field(default_factory=dict)
    max_restarts: Optional[int] = None
    restarts_key: str = ""
    label: str = ""


@dataclass(frozen=True)
class StageInputs:
    """What a stage function may read besides its rows: the suite's problems by id (DOLCE span
    references) and the suite's built table (DOLCE problems, a sweep's samples; None: no table)."""

    problems: ProblemSource
    suite_table: Optional[pl.LazyFrame] = None


class ProblemSource:
    """Problems of a stored problems table, read by id a row group at a time (an LRU of
    ``cache_groups`` row groups): memory holds a few problems, not the suite. ``open_file()``
    opens the stored table (random access); ``problems``: an in-memory table instead."""

    def __init__(self, open_file: Optional[Callable[[], Any]] = None, problems: Optional[pl.DataFrame] = None,
                 cache_groups: int = 4):
        self._frame = pl.DataFrame() if problems is None and open_file is None else problems
        self._open_file = open_file
        self._cache: OrderedDict[int, pl.DataFrame] = OrderedDict()
        self._cache_groups = cache_groups
        self._index: Optional[dict[str, int]] = None
        self._file: Any = None

    def _open(self) -> Any:
        if self._file is None:
            self._file = pq.ParquetFile(self._open_file())  # type: ignore[misc]
            groups = [self._file.read_row_group(i, columns=["problem_id"]).column(0).to_pylist()
                      for i in range(self._file.num_row_groups)]
            self._index = {pid: i for i, ids in enumerate(groups) for pid in ids}
        return self._file

    def _group(self, i: int) -> pl.DataFrame:
        if i in self._cache:
            self._cache.move_to_end(i)
            return self._cache[i]
        frame: pl.DataFrame = pl.from_arrow(self._open().read_row_group(i))  # type: ignore[assignment]
        self._cache[i] = frame
        while len(self._cache) > self._cache_groups:
            self._cache.popitem(last=False)
        return frame

    def get(self, ids: list[str]) -> pl.DataFrame:
        """The problems with these ids (unknown ids are left out)."""
        wanted = list(dict.fromkeys(ids))
        if self._frame is not None:
            return self._frame.filter(pl.col("problem_id").is_in(wanted))
        self._open()
        assert self._index is not None
        groups = sorted({self._index[p] for p in wanted if p in self._index})
        frames = [self._group(i).filter(pl.col("problem_id").is_in(wanted)) for i in groups]
        if not frames:  # none known: an empty table of the same schema (rendering names the id)
            return pl.from_arrow(self._file.schema_arrow.empty_table())  # type: ignore[return-value]
        return pl.concat(frames, how="diagonal_relaxed")


def render(requests: pl.DataFrame, problems: ProblemSource) -> pl.DataFrame:
    """``requests`` with ``head, context, tail``: kept when inline, else rendered from the span's problem."""
    if set(INLINE) <= set(requests.columns) or not requests.height:
        return requests
    parts = render_prompt_parts(requests, problems.get(requests["problem_id"].to_list()))
    return pl.concat([requests, parts], how="horizontal")


class PromptTokenizer(HFTokenizer):
    """The engine's tokenizer on a CPU actor; ``prompt_ids(text)`` are the ids sent to the engine.

    :meth:`load` reads a local folder with ``tokenizer.json``, a ``tokenizer.json`` file, or a
    Hugging Face name (through ``transformers``, which comes with ``raylc[vllm]``, and which a
    chat template needs). With ``chat_template`` the text becomes one user message rendered by
    the tokenizer's ``apply_chat_template(..., tokenize=False, add_generation_prompt=True)`` and
    is encoded without special tokens (the template has them); without, it is encoded with the
    tokenizer's default special tokens. ``encode`` / ``decode`` (no special tokens) serve
    truncation; ``count`` is the length of the ids sent, so the template is budgeted for."""

    def __init__(self, tok: Any, chat_template: bool, name: str = "engine", fast: bool = False):
        """``tok``: a ``transformers`` tokenizer, or with ``fast`` a ``tokenizers.Tokenizer``."""
        super().__init__(name, tok=tok, fast=fast)
        self.name, self.chat_template = name, chat_template
        self._last: tuple[str, list[int]] = ("", [])
        self._raw: Optional[PromptTokenizer] = None
        if chat_template:
            try:
                self.prompt_ids("")
            except Exception as exc:  # e.g. a base model's tokenizer without a chat template
                first = (str(exc).splitlines() or [type(exc).__name__])[0]
                raise BackendUnavailable(
                    f"{name}: cannot apply the chat template ({first}); set probe.chat_template: false") from None

    @classmethod
    def load(cls, spec: str, chat_template: bool) -> "PromptTokenizer":
        """The tokenizer at ``spec`` (see the class docstring)."""
        try:
            base = HFTokenizer(spec, transformers_only=chat_template)
        except ImportError:
            raise BackendUnavailable(
                f"tokenizer {spec!r}: needs 'transformers' (pip install 'raylc[vllm]')"
                + ("; or set probe.chat_template: false with a local tokenizer.json" if chat_template else "")
            ) from None
        return cls(base._tok, chat_template, spec, fast=base._fast)

    def raw(self) -> "PromptTokenizer":
        """This tokenizer without the chat template: a prompt encoded as it is, with the
        tokenizer's default special tokens (LongBench v1 ``pred.py``'s few-shot and code datasets)."""
        if not self.chat_template:
            return self
        if self._raw is None:
            self._raw = PromptTokenizer(self._tok, False, self.name, fast=self._fast)
        return self._raw

    def prompt_ids(self, text: str) -> list[int]:
        """The ids sent to the engine for ``text`` (the last result is memoized)."""
        if self._last[0] == text and self._last[1]:
            return self._last[1]
        if not self.chat_template:
            ids = self.encode(text, special=True)
        else:
            rendered = self._tok.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
            ids = list(rendered) if not isinstance(rendered, str) else self.encode(rendered)
        self._last = (text, ids)
        return ids

    def count(self, text: str) -> int:
        return len(self.prompt_ids(text))


#: texts :func:`added_tokens` measures over: empty, short, spaced, multi-line, digits, non-ASCII
_MEASURED = ("", "a", "Hello, world.", " spaced out ", "two\nlines\n", "12345 67890", "naïve café, 文字")
#: tokens added to a chat template's measured count: where template and text meet, a tokenizer
#: may merge or split a token or two differently for another text
TEMPLATE_MARGIN = 2


@lru_cache(maxsize=8)
def added_tokens(spec: str, chat_template: bool) -> int:
    """An upper bound of the tokens :class:`PromptTokenizer` ``load(spec, chat_template)`` adds to a
    text: the most ``len(prompt_ids(t)) - len(encode(t))`` over a few texts (:data:`_MEASURED`),
    plus :data:`TEMPLATE_MARGIN` with a chat template, as the tokens where template and text meet
    may differ by a token or two (without one: only the special tokens, e.g. BOS, exactly)."""
    tok = PromptTokenizer.load(spec, chat_template)
    most = max(len(tok.prompt_ids(t)) - len(tok.encode(t)) for t in _MEASURED)
    return max(most + (TEMPLATE_MARGIN if chat_template else 0), 0)


def tokenize(rendered: pl.DataFrame, tokenizer: PromptTokenizer, max_model_len: int, default_max_tokens: int,
             policy: str) -> pl.DataFrame:
    """Fit each ``head + context + tail`` into ``max_model_len`` minus its ``max_tokens`` (the
    row's, or ``default_max_tokens``) and tokenize it: the rows without the prompt parts, plus
    ``prompt_token_ids`` (null when it cannot fit), ``prompt_tokens``, ``truncated_tokens`` and
    ``error`` ("prompt too long: ..." for a refused prompt). A row whose ``raw_prompt`` is true is
    encoded without the chat template (:meth:`PromptTokenizer.raw`)."""
    own = (rendered["max_tokens"].to_list() if "max_tokens" in rendered.columns else [None] * rendered.height)
    raw = rendered["raw_prompt"].to_list() if "raw_prompt" in rendered.columns else [None] * rendered.height
    ids_col: list[Optional[list[int]]] = []
    n_col, cut_col, err_col = [], [], []
    chat_tokenizer = tokenizer
    for (head, context, tail), limit, bare in zip(rendered.select(INLINE).iter_rows(), own, raw):
        tokenizer = chat_tokenizer.raw() if bare else chat_tokenizer
        source = "probe.sampling.max_tokens" if limit is None else "the suite's limit for this request"
        try:
            text, cut = fit_to_window(head, context, tail, tokenizer, max_model_len,  # type: ignore[arg-type]
                                      int(default_max_tokens if limit is None else limit), policy, source)
        except PromptTooLong as exc:
            ids_col.append(None)
            n_col.append(tokenizer.count(head + context + tail))
            cut_col.append(0)
            err_col.append(f"prompt too long: {exc}")
            continue
        ids = tokenizer.prompt_ids(text)
        ids_col.append(ids)
        n_col.append(len(ids))
        cut_col.append(cut)
        err_col.append(None)
    return rendered.drop(INLINE).with_columns(
        pl.Series("prompt_token_ids", ids_col, dtype=pl.List(pl.Int32)),
        pl.Series("prompt_tokens", n_col, dtype=pl.Int64),
        pl.Series("truncated_tokens", cut_col, dtype=pl.Int64),
        pl.Series("error", err_col, dtype=pl.String),
    )


def prepare(rows: pl.DataFrame, problems: ProblemSource, job: Any,
            tokenizer: Optional[PromptTokenizer] = None) -> pl.DataFrame:
    """The prepare stage: :func:`render`, then for a token engine (``tokenizer`` given)
    :func:`tokenize` into the probe's window."""
    probe = job.probe
    rendered = render(rows, problems)
    if tokenizer is None:
        return rendered
    return tokenize(rendered, tokenizer, probe.window(), probe.max_tokens(), probe.truncation)


def _passthrough(rows: pl.DataFrame) -> pl.DataFrame:
    """The columns that travel from the request to its completion row (ids and keys)."""
    return rows.drop([c for c in (*INLINE, *TOKENIZED_COLUMNS, "max_tokens", "raw_prompt")
                      if c in rows.columns])


def generate_text(rows: pl.DataFrame, backend: Any) -> pl.DataFrame:
    """The engine stage for text backends (simulated, OpenAI-compatible): rendered
    ``head, context, tail`` in, the pass-through columns plus the generation columns out (a
    null ``max_tokens`` is the backend's own default; ``raw_prompt`` goes to the backend as ``raw``).
    The rows are served by ``backend.for_rows(rows)``."""
    from raylc.backends.base import generations_frame

    backend = backend.for_rows(rows)
    prompts = list(rows.select(INLINE).iter_rows())
    limits = rows["max_tokens"].to_list() if "max_tokens" in rows.columns else None
    raw = rows["raw_prompt"].to_list() if "raw_prompt" in rows.columns and rows["raw_prompt"].any() else None
    out = generations_frame(backend.generate(prompts, limits, raw) if raw else backend.generate(prompts, limits)
                            ) if rows.height else generations_frame([])
    return pl.concat([_passthrough(rows), out], how="horizontal")


async def generate_tokens(rows: pl.DataFrame, engine: Any, default_max_tokens: int) -> pl.DataFrame:
    """The engine stage for token engines (vLLM): rows of :func:`tokenize` in, the pass-through
    columns plus the generation columns out; refused prompts keep their error and skip the engine."""
    from raylc.backends.base import generation, generations_frame, request_max_tokens

    ids = rows["prompt_token_ids"].to_list()
    limits = request_max_tokens(rows["max_tokens"].to_list() if "max_tokens" in rows.columns else None,
                                rows.height, default_max_tokens)
    todo = [i for i, x in enumerate(ids) if x is not None]
    done = await engine.generate([ids[i] for i in todo], [limits[i] for i in todo]) if todo else []
    n, cut, err = rows["prompt_tokens"].to_list(), rows["truncated_tokens"].to_list(), rows["error"].to_list()
    results = [generation(prompt_tokens=n[i], error=err[i], latency_s=None) for i in range(rows.height)]
    for i, result in zip(todo, done):
        result["truncated_tokens"] = int(cut[i])
        results[i] = result
    return pl.concat([_passthrough(rows), generations_frame(results)], how="horizontal")


# ---- the stages ---------------------------------------------------------------------------


class TextStage:
    """Render the prompts and generate with a text backend, ``backend(job, suite_table)``, built
    once per actor and closed with it."""

    def __init__(self, job: Job, inputs: StageInputs, backend: Callable[[Job, Optional[pl.LazyFrame]], Backend]):
        self.problems = inputs.problems
        self.backend = backend(job, inputs.suite_table)

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        return generate_text(render(rows, self.problems), self.backend)

    def close(self) -> None:
        self.backend.close()


def text_pipeline(job: Job, backend: Callable[[Job, Optional[pl.LazyFrame]], Backend]) -> list[PipelineStage]:
    """A text backend's pipeline: one pool of ``ray.actors`` actors with ``ray.actor_num_cpus``
    CPUs each (fractional, so the pool never starves other tasks on small machines) that render
    and generate (``backend``: a module-level function, so that the stage pickles)."""
    from functools import partial

    return [PipelineStage("text", partial(TextStage, backend=backend), actors=job.ray.actors,
                          num_cpus=job.ray.actor_num_cpus)]


class PrepareStage:
    """A token engine's CPU stage: render, then fit into the probe's window and tokenize with
    the engine's tokenizer (``tokenizer``: its spec and whether to apply the chat template)."""

    def __init__(self, job: Job, inputs: StageInputs, tokenizer: tuple[str, bool]):
        self.job, self.problems = job, inputs.problems
        self.tokenizer = PromptTokenizer.load(*tokenizer)

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        return prepare(rows, self.problems, self.job, self.tokenizer)


class EngineStage:
    """A token engine's generating stage: ``engine(probe)`` (``await generate(token_ids,
    max_tokens)``, ``shutdown()``) built once per actor, shut down with it."""

    def __init__(self, job: Job, inputs: StageInputs, engine: Callable[[Any], Any]):
        self.default_max_tokens = job.probe.max_tokens()
        self.engine = engine(job.probe)

    async def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        return await generate_tokens(rows, self.engine, self.default_max_tokens)

    def close(self) -> None:
        self.engine.shutdown()

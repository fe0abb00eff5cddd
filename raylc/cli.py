"""The ``raylc`` command line: the only entry point."""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Literal, Optional, get_args, get_origin

import polars as pl
import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from raylc import __version__
from raylc.dolce.options import POSTERIOR_FIELDS, FitOptions
from raylc.io.errors import StoreError, StoreUnavailable
from raylc.run.session import RayUnavailable
from raylc.spec import JobSpecError, load_job, parse_overrides

try:  # the click that typer runs: its own copy in recent typer, else the click package
    from typer._click import exceptions as _click_errors
except ImportError:  # pragma: no cover - typer before it vendored click
    from click import exceptions as _click_errors  # type: ignore[no-redef]


class _OneLineErrors(TyperGroup):
    """The command line's own mistakes (an unknown option or command, a missing argument, a value
    click cannot parse) as one ``error:`` line naming the command, exit 2, not click's usage box."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except _click_errors.NoArgsIsHelpError as exc:  # a bare command: its help (printed), exit 2
            code = exc.exit_code
        except _click_errors.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "raylc"
            typer.echo(f"error: {where}: {exc.format_message()} (see {where} --help)", err=True)
            code = exc.exit_code
        except _click_errors.ClickException as exc:
            typer.echo(f"error: {exc.format_message()}", err=True)
            code = exc.exit_code
        except typer.Abort:
            typer.echo("aborted", err=True)
            code = 1
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
    name="raylc",
    help="Distributed long-context LLM evaluation on Ray: DOLCE focus categories, length sweeps, LongScore.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Python warnings as ``warning: <message>``, one line, no source line (``warnings.showwarning``)."""
    text = " ".join(str(message).split())
    print(f"warning: {text}", file=file if file is not None else sys.stderr)


def _version(shown: bool) -> None:
    """``--version``: print raylc's version and stop."""
    if shown:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _setup(
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="Show Ray's own logs (its banner, its error records with tracebacks, C++ error "
                                      "lines); also RAYLC_VERBOSE=1."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print raylc's version and exit."),
) -> None:
    """Distributed long-context LLM evaluation on Ray: DOLCE focus categories, length sweeps, LongScore."""
    from raylc.run.session import VERBOSE_ENV

    warnings.showwarning = _one_line_warning
    if verbose:
        os.environ[VERBOSE_ENV] = "1"  # read where Ray starts, and passed on by `submit`


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


_Errors = tuple[Any, ...]  # exception classes, or "module:Class" imported only when a command fails
_UNAVAILABLE: _Errors = (StoreUnavailable, RayUnavailable)  # the store or Ray did not answer: exit 1
_BAD_INPUT: _Errors = (JobSpecError, StoreError)  # a bad job, file, folder or table: exit 2


def _classes(errors: _Errors) -> tuple[type[BaseException], ...]:
    return tuple(getattr(importlib.import_module(e.partition(":")[0]), e.partition(":")[2]) if isinstance(e, str)
                 else e for e in errors)


def _errors(exit1: _Errors = _UNAVAILABLE, exit2: _Errors = _BAD_INPUT) -> Callable[[Callable[..., None]],
                                                                                Callable[..., None]]:
    """The one place a command's exceptions become exit codes: an exception of ``exit1`` (a
    service that did not answer, a missing optional package; also running out of memory) is one
    ``error: <message>`` line and exit 1, one of ``exit2`` (bad input) the same line and exit 2;
    ``exit1`` is tried first, so a subclass listed there (StoreUnavailable of StoreError) wins.
    Anything else escapes. A class may be named ``"module:Class"``, so the command line imports
    its module only on failure."""
    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            try:
                command(*args, **kwargs)
            except Exception as exc:  # typer.Exit and click's errors are in neither tuple: they escape
                if isinstance(exc, MemoryError):  # numpy's names the size it could not allocate
                    _fail(f"out of memory ({str(exc).strip() or 'no detail'})", 1)
                if isinstance(exc, _classes(exit1)):
                    _fail(str(exc), 1)
                if isinstance(exc, _classes(exit2)):
                    _fail(str(exc))
                raise
        return wrapper
    return decorate


def _whole(value: Optional[str], option: str, low: int = 0, high: Optional[int] = None,
           what: str = "a whole number", example: str = "") -> Optional[int]:
    """A whole number given on the command line (``2000000`` or ``2_000_000``) in [low, high]; else
    one ``error:`` line naming the option (exit 2). Read here, not by click, whose error is a usage box."""
    if value is None:
        return None
    digits = value.strip().replace("_", "")
    if (not digits.isdigit() or not digits.isascii() or len(digits) > 30  # past any bound (and Python's 4,300)
            or not low <= int(digits) <= (high or int(digits))):
        bounds = f">= {low:,}" if high is None else f"from {low:,} to {high:,}"
        _fail(f"{option} {value!r}: expected {what} {bounds}{example}")
    return int(digits)


def _number(value: Optional[str], option: str, low: float = 0.0, above: bool = False) -> Optional[float]:
    """A finite number given on the command line, at least ``low`` (above it when ``above``);
    else one ``error:`` line naming the option (exit 2), not click's usage box."""
    if value is None:
        return None
    try:
        number = float(value.strip().replace("_", ""))
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < low or (above and number == low):
        _fail(f"{option} {value!r}: expected a number {'>' if above else '>='} {low:g}")
    return number


def _tokens(value: Optional[str], option: str) -> Optional[int]:
    """A token count (:func:`_whole`), at least 1."""
    return _whole(value, option, 1, what="a whole number of tokens", example=" (e.g. 2000000)")


N_BOOT_MAX, SEED_MAX = 100_000, 2**32 - 1  # bootstrap resamples; numpy's seeds are below 2**32


def _preflight(job: Any, job_file: Path, hub: bool = False) -> None:
    """Refuse (:class:`raylc.backends.preflight.PreflightError`, a JobSpecError) a vLLM job that vLLM would
    refuse at start-up; warnings go to stderr. Without ``hub`` only local configs are read, and a
    model whose config is not found locally is not checked (a warning)."""
    from raylc.backends.preflight import preflight

    for report in preflight(job, source=job_file, hub=hub, require_config=False):
        for warning in report.warnings:
            typer.echo(f"warning: {warning}", err=True)


@app.command()
@_errors(exit1=(*_UNAVAILABLE, "raylc.backends.base:BackendUnavailable", "raylc.run.errors:InferenceFailed",
                "raylc.run.errors:NothingWritten",
                ImportError),  # an optional package the job needs here (a tokenizer's transformers)
         exit2=(*_BAD_INPUT, "raylc.run.errors:RunError", "raylc.io.names:UnsafeName",
                "raylc.dolce.fit:ObservationError"))
def run(
    job_file: Path = typer.Argument(..., help="Job YAML file (see jobs/quickstart.yaml)."),
    store: Optional[str] = typer.Option(None, "--store",
                                        help="Store root (local folder or s3://bucket/prefix); overrides store.path."),
    run_id: Optional[str] = typer.Option(None, "--run-id",
                                         help="Run id; an existing run with the same job resumes at its first "
                                              "unfinished stage. Default: <job name>-<UTC time>-<6 hex digits of "
                                              "the job's fingerprint>."),
    seed: Optional[str] = typer.Option(None, "--seed", metavar="N", help="Seed; overrides the job's seed."),
    settings: list[str] = typer.Option([], "--set",
                                       help="Override a job field, key.path=value (YAML value); repeatable."),
    max_prompt_tokens: Optional[str] = typer.Option(None, "--max-prompt-tokens", metavar="N",
                                                    help="Send only the requests that keep the run's prompt tokens "
                                                         "at or under N (the probe's and an LLM judge's; exit 3 when "
                                                         "some wait; the same run with a higher N resumes); "
                                                         "overrides inference.max_prompt_tokens."),
) -> None:
    """Run a job end to end (DOLCE suites: build, sample, infer, score, fit, report;
    length-controlled suites: build, infer, score, report)."""
    from raylc.evaluate import evaluate
    from raylc.io.names import UnsafeName, path_segment
    from raylc.run.errors import BudgetReached, NothingWritten, RunInterrupted
    from raylc.run.runner import default_run_id

    cap = _tokens(max_prompt_tokens, "--max-prompt-tokens")
    seed_ = _whole(seed, "--seed", 0, SEED_MAX)
    try:
        overrides = parse_overrides(settings)
        if store is not None:
            overrides["store.path"] = store
        if seed_ is not None:
            overrides["seed"] = seed_
        if cap is not None:
            overrides["inference.max_prompt_tokens"] = cap
        job = load_job(job_file, overrides)
        if run_id is not None:  # the run's folder name (raylc/io/names.py)
            try:
                path_segment(run_id, "--run-id")
            except UnsafeName as exc:
                raise JobSpecError(str(exc)) from None
        _preflight(job, job_file)  # before Ray starts and anything is written
        run_id = run_id or default_run_id(job)
        evaluate(job, run_id, log=lambda m: typer.echo(m, err=True), overrides=overrides)
    except (RunInterrupted, BudgetReached) as exc:  # SIGINT / SIGTERM: exit 130 / 143; the prompt-token cap: 3
        typer.echo(str(exc), err=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:  # before the run started (loading, checking the job)
        typer.echo("interrupted before the run started; nothing was written", err=True)
        raise typer.Exit(130) from None
    except NothingWritten:  # the store failed before the run's first write: exit 1, no resume hint
        raise
    except StoreUnavailable as exc:
        _fail(f"{exc} (finished stages are kept; re-run with --run-id {run_id} to resume)", 1)


@app.command()
@_errors(exit1=())  # a store that does not answer is exit 2 here, as it always was
def report(run_dir: str = typer.Argument(...,
                                         help="A run folder: <store>/<run_id> (local path or s3:// URI).")) -> None:
    """Print a finished run's report: its page's sections (report/index.html), in the page's order."""
    from raylc.evaluate import report_page
    from raylc.io.tables import console

    report_page(run_dir).print(console())  # the page's sections, in the page's order


@app.command()
@_errors()
def status(run_dir: str = typer.Argument(...,
                                         help="A run folder: <store>/<run_id> (local path or s3:// URI).")) -> None:
    """What a run is doing: each stage's state; for inference the requests stored against planned, rates and an ETA."""
    from raylc.io.tables import console, rich_table
    from raylc.run.folder import RunFolder
    from raylc.run.progress import duration
    from raylc.run.status import run_status

    st = run_status(RunFolder.at(run_dir))
    rows = []
    for stage, state in st["stages"].items():
        seconds = st["seconds"].get(stage)
        rows.append({"stage": stage, "state": state, "seconds": "" if seconds is None else f"{seconds:.1f}",
                     "detail": _stage_detail(stage, state, st)})
    screen = console()  # the first line wraps between words on a narrow terminal: the run id stays whole
    updated = ("last update unknown (its manifest holds no readable time)" if st["age_s"] is None
               else f"updated {duration(st['age_s'])} ago")
    screen.print(f"run {st['run_id']} ({st['uri']}): {st['state']}; job {st['job']}, model {st['model']}, {updated}",
                 highlight=False, markup=False)
    screen.print(rich_table(pl.DataFrame(rows), "stages"))
    if st["state"] in ("interrupted", "failed"):
        typer.echo(f"re-run the job with --run-id {st['run_id']} (and the same --store) to resume: finished "
                   "stages and stored requests are kept")
    elif st["state"] == "stopped":
        typer.echo(f"re-run the job with --run-id {st['run_id']} (and the same --store) and a higher "
                   "--max-prompt-tokens, or none, to resume: stored requests are kept")


def _stage_detail(stage: str, state: str, st: dict[str, Any]) -> str:
    """A stage's detail in ``raylc status``: its counts; for inference under way the requests stored
    against planned, rates and an ETA; for a stage stopped at the prompt-token cap, the budget."""
    from raylc.run.budget import budget_line
    from raylc.run.progress import duration

    if state == "stopped" and st["budget"] is not None and st["budget"][0] == stage:
        return f"stopped at its budget: {budget_line(st['budget'][1])}"
    p = st["infer"]
    if stage != "infer" or not p or state == "done" or p.get("planned") is None:
        counts = st["rows"].get(stage) or {}
        return ", ".join(f"{k}={'unknown' if v is None else f'{v:,}'}" for k, v in counts.items())
    share = p["stored"] / p["planned"] if p["planned"] else 1.0
    return (f"stored {p['stored']:,} of {p['planned']:,} requests ({share:.1%}), errors {p.get('errors', 0):,}; "
            f"{p.get('requests_per_s', 0):,.1f} req/s, {p.get('prompt_tokens_per_s', 0):,.0f} prompt tok/s, "
            f"{p.get('generated_tokens_per_s', 0):,.0f} generated tok/s"
            + (f"; ETA {duration(p['eta_s'])}" if "eta_s" in p else "")
            + (f"; last shard {duration(p['last_update_s'])} ago" if "last_update_s" in p else "")
            + (f"; no shard stored yet (started {duration(p['waiting_s'])} ago)" if "waiting_s" in p else ""))


@app.command()
@_errors()
def runs(store: str = typer.Argument("./runs", help="A store root (local folder or s3://bucket/prefix); "
                                                     "default ./runs, where jobs write unless store.path says "
                                                     "otherwise.")) -> None:
    """The runs in a store: run id, job, model, state, when created, age and last update, newest first."""
    from raylc.io.tables import console, rich_table
    from raylc.run.progress import duration
    from raylc.run.status import list_runs

    table = list_runs(store)
    if not table.height:
        typer.echo(f"{store}: no runs")
        return
    ago = pl.col("updated_s").map_elements(lambda s: f"{duration(s)} ago", return_dtype=pl.String)
    age = pl.col("age_s").map_elements(duration, return_dtype=pl.String)
    shown = table.with_columns(age.alias("age"), ago.alias("updated")).drop("age_s", "updated_s")
    # a time the manifest lacks, or holds as something not a time, is unknown (the row of an
    # unreadable manifest says so in its state)
    known = pl.col("state") != "unreadable manifest"
    shown = shown.with_columns(pl.when(known).then(pl.col(c).fill_null("unknown")).otherwise(pl.col(c)).alias(c)
                               for c in ("created", "age", "updated"))
    console().print(rich_table(shown, f"runs in {store}"))


@app.command()
@_errors(exit1=(*_UNAVAILABLE, "raylc.run.submit:SubmitError"),
         exit2=(*_BAD_INPUT, "raylc.run.submit:AddressError", "raylc.io.names:UnsafeName"))
def submit(
    job_file: Path = typer.Argument(..., help="Job YAML file inside the working directory."),
    address: str = typer.Option(..., "--address", help="Ray dashboard address, e.g. http://HEAD:8265."),
    store: Optional[str] = typer.Option(None, "--store",
                                        help="Store root as seen from the cluster (e.g. s3://bucket/runs)."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id to use (or resume) on the cluster."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Print the job id and return without following the logs."),
    working_dir: Path = typer.Option(Path("."), "--working-dir",
                                     help="Folder uploaded as the job's working directory."),
    settings: list[str] = typer.Option([], "--set",
                                       help="Override a job field, key.path=value (YAML value); repeatable."),
) -> None:
    """Submit a job file to a Ray cluster (Ray Jobs API) and follow its logs. A cluster whose job agent is
    still starting is waited for, up to ray.connect_timeout_s (60 s; --set ray.connect_timeout_s=S)."""
    from raylc.run.submit import submit as do_submit

    _preflight(load_job(job_file, parse_overrides(settings)), job_file, hub=True)
    job_id, status = do_submit(job_file, address, store, run_id, not no_wait, working_dir, log=typer.echo,
                               settings=settings, notice=lambda m: typer.echo(m, err=True))
    typer.echo(f"{job_id} {status}")


@app.command()
@_errors()
def longscore(
    scores: list[str] = typer.Argument(...,
                                       help="Scores tables (Parquet/CSV/JSONL, local or s3://: model, task, length, "
                                            "score [, sample_id]) and/or finished length-suite runs (<store>/<run_id>, "
                                            "or a glob such as runs/helmet-*)."),
    out: str = typer.Option(..., "--out",
                            help="Output folder (local or s3://) for per_length/summary tables and figures."),
    base_lengths: Optional[str] = typer.Option(None, "--base-lengths",
                                               help="Comma-separated base lengths in tokens (default: the runs' own, "
                                                    "else 2048,4096,6144)."),
    n_boot: Optional[str] = typer.Option(None, "--n-boot", metavar="N",
                                         help="Bootstrap resamples for confidence intervals (needs sample_id; default: "
                                              "a run's own, as its report stated; 0 for score tables)."),
    seed: Optional[str] = typer.Option(None, "--seed", metavar="N",
                                       help="Bootstrap seed (default: a run's own; 0 for score tables)."),
    ray: Optional[bool] = typer.Option(None, "--ray/--no-ray",
                                       help="Aggregate per (model, task) as Ray tasks (default: when RAY_ADDRESS is "
                                            "set)."),
    figures: bool = typer.Option(True, "--figures/--no-figures",
                                 help="Draw the PNG figures (1-3 s of matplotlib per call); --no-figures writes the "
                                      "tables only."),
) -> None:
    """LongScore LC_l = 100 (S_l - Base) / Base per model and task, rankings, correlations, figures."""

    from raylc.io.tables import console, rich_table
    from raylc.longscore import run_longscore

    lengths = None
    if base_lengths is not None:
        try:
            lengths = [int(x) for x in base_lengths.split(",") if x.strip()]
        except ValueError:
            lengths = []
        if not lengths or min(lengths) < 1:
            _fail(f"--base-lengths {base_lengths!r}: expected comma-separated lengths of 1 or more, e.g. 2048,4096")
    from raylc.run.tasks import task_mapper

    result = run_longscore(scores, out, lengths, _whole(n_boot, "--n-boot", 0, N_BOOT_MAX),
                           _whole(seed, "--seed", 0, SEED_MAX),
                           task_mapper(ray, default=bool(os.environ.get("RAY_ADDRESS"))),  # RAY_ADDRESS: a cluster
                           figures=figures)
    from raylc.sweep.report import bootstrap_note

    cols = ["model", "task", "base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi", "rank_base", "rank_score",
            "rank_lc", "n_boot", "boot_seed", "warning"]
    if result["summary"]["run_id"].is_not_null().any():
        cols.insert(0, "run_id")
    summary = result["summary"].select(cols).with_columns(
        pl.col("base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi").round(2))
    console().print(rich_table(summary, f"LongScore (LC in %, averaged over long lengths; "
                                        f"{bootstrap_note(result['summary'])})"))


@app.command()
@_errors()
def compare(
    runs: list[str] = typer.Argument(...,
                                     help="Finished runs: <store>/<run_id> (local or s3://), or globs such as "
                                          "runs/quickstart-*."),
    out: str = typer.Option(..., "--out",
                            help="Output folder (local or s3://) for the leaderboard tables and figures."),
    n_boot: Optional[str] = typer.Option(None, "--n-boot", metavar="N",
                                         help="Bootstrap resamples for LongScore's confidence intervals (default: "
                                              "each run's own, as its report stated)."),
    seed: Optional[str] = typer.Option(None, "--seed", metavar="N",
                                       help="Bootstrap seed (default: each run's own)."),
) -> None:
    """Runs side by side: LongScore per run and task with CIs and rankings, DOLCE category
    shares with 95% intervals, agreement between probes, figures."""
    from raylc.compare import compare_runs, find_runs
    from raylc.io.tables import console

    n_boot_, seed_ = _whole(n_boot, "--n-boot", 0, N_BOOT_MAX), _whole(seed, "--seed", 0, SEED_MAX)
    _, page = compare_runs(find_runs(runs), out, n_boot=n_boot_, seed=seed_)
    page.print(console())  # the page's sections, in the page's order
    typer.echo(f"tables, figures and index.html -> {out}", err=True)


def _with_fit_options(command: Callable[..., None], omit: tuple[str, ...] = ()) -> Callable[..., None]:
    """Give ``command`` one option per :class:`raylc.dolce.options.FitOptions` field not in
    ``omit`` (``--em-steps-cow`` for ``em_steps_cow``; help from the field's description, choices
    from its Literal type, the default shown) and call it with ``options: FitOptions`` built from
    them. An invalid value is one ``error:`` line naming the option (exit 2)."""
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "options"]
    fields = {name: f for name, f in FitOptions.model_fields.items() if name not in omit}
    assert not {p.name for p in own} & set(fields), "a command parameter shadows a fit option"
    choices = {name: get_args(f.annotation) for name, f in fields.items() if get_origin(f.annotation) is Literal}
    added = [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=str,
            default=typer.Option(
                str(f.default), "--" + name.replace("_", "-"), help=f.description, rich_help_panel="Fit options",
                metavar="[" + "|".join(choices[name]) + "]" if name in choices else
                {int: "INTEGER", float: "FLOAT"}.get(f.annotation, "TEXT"),
            ),
        )
        for name, f in fields.items()
    ]

    def wrapper(**kwargs: Any) -> None:
        given = {name: kwargs.pop(name) for name in fields}
        try:
            options = FitOptions(**given)
        except ValidationError as exc:
            error = exc.errors()[0]
            name = str(error["loc"][0])
            expected = f"expected one of {', '.join(choices[name])}" if name in choices else error["msg"]
            _fail(f"--{name.replace('_', '-')} {given[name]!r}: {expected}")
        command(**kwargs, options=options)

    wrapper.__name__, wrapper.__doc__, wrapper.__module__ = command.__name__, command.__doc__, command.__module__
    wrapper.__signature__ = inspect.Signature([*own, *added])  # type: ignore[attr-defined]
    return wrapper


def _table_mapper(ray: Optional[bool]) -> Any:
    """Ray tasks (joining RAY_ADDRESS or a local Ray, at the first map: after the table was
    read and checked) unless ``ray`` is False (in process)."""
    if ray is False:
        return None
    from raylc.run.tasks import task_mapper

    def mapper(fn: Callable[..., Any], frames: list, *args: Any) -> list:
        return task_mapper(True, default=True)(fn, frames, *args)

    return mapper


@app.command()
@_errors()
@_with_fit_options
def fit(
    observations: str = typer.Argument(...,
                                       help="Observation table (Parquet/CSV/JSONL, local or s3://): task, problem_id, "
                                            "L, C, start, score, metric."),
    out: str = typer.Option(..., "--out",
                            help="Output folder (local or s3://) for problems.parquet, tasks.parquet and figures."),
    compare: Optional[str] = typer.Option(None, "--compare",
                                          help="A previous fit folder: also write compare.parquet (delta, Spearman "
                                               "rho, KL)."),
    ray: Optional[bool] = typer.Option(None, "--ray/--no-ray",
                                       help="Per-task fits as Ray tasks (default) or in-process."),
    figures: bool = typer.Option(True, "--figures/--no-figures",
                                 help="Draw categories.png and lambda_k.png (1-2 s of matplotlib); --no-figures writes "
                                      "the tables only."),
    *,
    options: FitOptions,
) -> None:
    """DOLCE fit of an observation table: lambda, k and focus category per problem."""

    from raylc.dolce.commands import run_fit
    from raylc.dolce.report import print_report
    from raylc.dolce.stages import report as report_tables
    from raylc.io.tables import console, rich_table

    out_frames = run_fit(observations, out, options, compare_uri=compare, mapper=_table_mapper(ray), figures=figures)
    screen = console()
    # the run's report tables (categories with their intervals, the probe check), as `raylc run` prints them
    print_report(report_tables(out_frames["problems"], out_frames["tasks"], pl.DataFrame(), pl.DataFrame()), screen)
    if "compare" in out_frames:
        screen.print(rich_table(out_frames["compare"].with_columns(pl.selectors.float().round(4)),
                                f"Compared with {compare}"))


@app.command()
@_errors()
@functools.partial(_with_fit_options, omit=POSTERIOR_FIELDS)
def sensitivity(
    observations: str = typer.Argument(..., help="Observation table from full enumeration (every start)."),
    out: str = typer.Option(..., "--out",
                            help="Output folder for sensitivity.parquet, sensitivity.png and sensitivity.json."),
    experiments: str = typer.Option("take_every,threshold", "--experiments",
                                    help="Comma-separated: take_every, take_ip_rate, sample_rate, sample_ip_rate, "
                                         "min_length, max_length (Appendix K.1, vs full enumeration), "
                                         "threshold (K.4)."),
    every: str = typer.Option("2,5,10", "--every", help="Take-every strides N to compare with full enumeration."),
    thresholds: str = typer.Option("0,0.25,0.5,0.75,1", "--thresholds",
                                   help="Binarization thresholds to compare with the reference's --threshold (0.5)."),
    set_: Optional[list[str]] = typer.Option(None, "--set",
                                             help="Settings of one experiment, NAME=V1,V2 (repeatable; adds NAME to "
                                                  "--experiments), e.g. sample_rate=0.1,0.3."),
    seed: str = typer.Option("0", "--seed", metavar="N",
                             help="Seed of the random strategies (sample_rate, sample_ip_rate)."),
    ray: Optional[bool] = typer.Option(None, "--ray/--no-ray", help="Grid cells as Ray tasks (default) or in-process."),
    *,
    options: FitOptions,
) -> None:
    """Sensitivity of lambda, k and the noise to sampling strategy and binarization threshold
    (DOLCE Section 6); the reference and every refit use the fit options (point estimates: no
    posterior)."""

    from raylc.dolce.commands import run_sensitivity_grid
    from raylc.dolce.sensitivity import WHOLE_SETTINGS
    from raylc.io.tables import console, rich_table
    from raylc.text.sampling import MAX_UNITS

    try:
        ev = [int(x) for x in every.split(",") if x.strip()]
        th = [float(x) for x in thresholds.split(",") if x.strip()]
    except ValueError:
        _fail(f"--every {every!r} / --thresholds {thresholds!r}: expected comma-separated numbers")
    if (not ev and "take_every" in experiments) or any(n < 1 or n > MAX_UNITS for n in ev):
        _fail(f"--every {every!r}: expected comma-separated strides from 1 to {MAX_UNITS:,}, e.g. 2,5,10")
    settings = {}
    for item in set_ or []:
        name, _, values = item.partition("=")
        try:
            settings[name.strip()] = [float(x) for x in values.split(",") if x.strip()] or None
        except ValueError:
            settings[name.strip()] = None
        if settings[name.strip()] is None:
            _fail(f"--set {item!r}: expected NAME=V1,V2 with numbers")
        whole = name.strip() in WHOLE_SETTINGS  # strides and lengths: whole numbers of units
        if not all(math.isfinite(v) and (not whole or (v.is_integer() and 0 <= v <= MAX_UNITS))
                   for v in settings[name.strip()]):
            _fail(f"--set {item!r}: expected finite numbers"
                  + (f", whole ones from 0 to {MAX_UNITS:,} for {name.strip()}" if whole else ""))
    names = [e.strip() for e in experiments.split(",") if e.strip()]
    names += [n for n in settings if n not in names]  # --set NAME adds the experiment
    sens = run_sensitivity_grid(observations, out, names, ev, th, options, settings=settings,
                                seed=_whole(seed, "--seed", 0, SEED_MAX),
                                mapper=_table_mapper(ray))
    console().print(rich_table(sens.with_columns(pl.selectors.float().round(3)), "DOLCE sensitivity"))


@app.command()
@_errors(exit2=(*_BAD_INPUT, "raylc.suites.documents:DocumentsError"))
def units(
    data: str = typer.Argument(...,
                               help="Problems file (JSONL/Parquet/CSV, local or s3://) with a task and a "
                                    "context field."),
    spec: str = typer.Option("s", "--spec",
                             help="Unit spec (DOLCE Table 3 letters, e.g. ls); comma-separated to compare: b,ls."),
    task_field: str = typer.Option("task", "--task-field", help="Field holding the task name."),
    context_field: str = typer.Option("context", "--context-field", help="Field holding the context."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="Token counter: default, or hf:<name-or-path>."),
    out: Optional[str] = typer.Option(None, "--out", help="Also write the statistics as Parquet (local or s3://)."),
) -> None:
    """Per-task unit statistics (DOLCE Figure 5): problems, context tokens, units per problem, tokens per unit."""
    from rich import box

    from raylc.io.tables import console, rich_table
    from raylc.suites.documents import unit_report

    stats = unit_report(data, [s.strip() for s in spec.split(",")], task_field, context_field, tokenizer, out)
    shown = stats.with_columns(pl.selectors.float().round(1)).rename(
        lambda c: c.replace("ctx_tokens_", "ctx\n").replace("unit_tokens_", "tok/u\n").replace("units_", "units\n"))
    table = rich_table(shown.rename({"problems": "n"}), f"Units of {data}")
    table.caption = "n: problems; ctx: tokens per context; units: units per problem; tok/u: tokens per unit"
    table.box, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, True
    for column in table.columns:
        column.min_width = max(map(len, str(column.header).split("\n")))
    console().print(table)


@app.command()
@_errors(exit1=(*_UNAVAILABLE, ImportError),  # an optional package the job needs here (a tokenizer's transformers)
         exit2=(ValueError, StoreError))  # JobSpecError, PlanError, a suite's data errors: bad input
def plan(
    job_file: Path = typer.Argument(..., help="Job YAML file (see jobs/quickstart.yaml)."),
    budget_tokens: Optional[str] = typer.Option(None, "--budget-tokens", metavar="N",
                                                help="Prompt-token budget: DOLCE, the smallest take-every strides (per "
                                                     "length) that fit; a length sweep, the most samples per length "
                                                     "that fit. The planned job gets it as its run-time cap."),
    price_per_mtok: Optional[str] = typer.Option(None, "--price-per-mtok", metavar="X",
                                                 help="Price in dollars per million (prompt + generated) tokens."),
    tokens_per_s_per_gpu: Optional[str] = typer.Option(None, "--tokens-per-s-per-gpu", metavar="X",
                                                       help="Throughput in tokens/s per GPU, for GPU-hours."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer",
                                            help="Tokenizer to count with ('default' or hf:<name-or-path>); default: "
                                                 "the job's."),
    overhead_tokens: Optional[str] = typer.Option(None, "--overhead-tokens", metavar="N",
                                                  help="Tokens a chat template adds to each request; default: what "
                                                       "the run's prompt-token cap adds (the probe's backend, "
                                                       "measured with its tokenizer; 0 if it cannot be loaded)."),
    write: Optional[Path] = typer.Option(None, "--write",
                                         help="Write the planned job (chosen strides) as YAML that "
                                              "`raylc run` accepts."),
    settings: list[str] = typer.Option([], "--set",
                                       help="Override a job field, key.path=value (YAML value); repeatable."),
) -> None:
    """Plan a job without inference: requests, tokens, strides, prefix reuse and cost."""

    from raylc.evaluate import evaluation_for
    from raylc.io.tables import console, rich_table

    budget = _tokens(budget_tokens, "--budget-tokens")
    price, speed = _number(price_per_mtok, "--price-per-mtok"), _number(tokens_per_s_per_gpu, "--tokens-per-s-per-gpu",
                                                                         above=True)
    overhead = _whole(overhead_tokens, "--overhead-tokens", 0, 1_000_000)
    job = load_job(job_file, parse_overrides(settings))
    _preflight(job, job_file)
    planned = evaluation_for(job).plan(job, budget, tokenizer=tokenizer, price_per_mtok=price,
                                       tokens_per_s_per_gpu=speed, overhead_tokens=overhead)
    if write is not None:
        try:
            planned.write(write)
        except OSError as exc:
            _fail(f"{write}: cannot write the plan ({exc.strerror or exc})")
    screen = console()
    lengths = planned.lengths
    if "stride" in lengths.columns:  # DOLCE sampling; a length sweep lists samples per task and length
        lengths = lengths.with_columns(pl.col("stride").cast(pl.String).fill_null("-"))
    screen.print(rich_table(lengths, f"Planned requests per length ({job_file})"))
    screen.print(rich_table(planned.summary(), "Plan"))
    for warning in planned.warnings():
        typer.echo(f"warning: {warning}", err=True)
    if write is not None:
        typer.echo(f"wrote {write}")


@app.command()
@_errors(exit1=(*_UNAVAILABLE, ImportError))  # JobSpecError: a bad job, what vLLM would refuse, an endpoint down
def check(
    job_file: Path = typer.Argument(..., help="Job YAML file (see jobs/dolce-vllm.yaml)."),
    gpu_memory_gib: Optional[str] = typer.Option(None, "--gpu-memory-gib", metavar="GIB",
                                                 help="GPU memory in GiB, at least 1 (default: from "
                                                      "probe.accelerator_type)."),
    settings: list[str] = typer.Option([], "--set",
                                       help="Override a job field, key.path=value (YAML value); repeatable."),
) -> None:
    """Check a job before a run: a vLLM probe against its model (length limit, tensor parallelism, KV cache, prompt
    lengths); an OpenAI-compatible one against its server (endpoint answers, model served, window, prompt lengths)."""
    from raylc.backends.preflight import preflight
    from raylc.evaluate import evaluation_for

    gib = _number(gpu_memory_gib, "--gpu-memory-gib", 1.0)
    job = load_job(job_file, parse_overrides(settings))
    reports = preflight(job, source=job_file, gpu_memory_gib=gib, hub=True, prompts=evaluation_for(job),
                        endpoints=True)
    if not reports:
        backends = ", ".join(sorted({getattr(job, s).backend for s in ("probe", "judge")
                                     if getattr(job, s) is not None}))
        typer.echo(f"{job_file}: valid job; nothing to check for backend {backends} (raylc check checks vllm and "
                   "openai probes)")
        return
    for report in reports:
        for line in report.lines():
            typer.echo(line)
        for warning in report.warnings:
            typer.echo(f"warning: {warning}", err=True)


def main() -> None:
    app(prog_name="raylc")


if __name__ == "__main__":
    sys.exit(main())

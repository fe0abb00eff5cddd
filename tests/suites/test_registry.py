"""Adding a suite (issue 15, acceptance 3): one config class and one builder function,
registered here without editing any raylc module; the job file names it by ``kind``, and it
runs end to end through :func:`raylc.evaluate.evaluate` (the sweep on the shared Ray instance)."""

from __future__ import annotations

from typing import Literal

import polars as pl
import pytest
from pydantic import Field

from raylc.evaluate import evaluate, evaluation_for, load_report
from raylc.spec import JobSpecError, parse_job
from raylc.suites.registry import SUITES, DolceSuite, SuiteInfo, SweepSuite, Task, register_suite
from raylc.text.tokenize import get_tokenizer

# ------------------------------------------------------------------ a toy length sweep


class ColourSuite(SweepSuite):
    """Find the one colour word hidden in filler of each target length."""

    kind: Literal["toy_colour"] = "toy_colour"
    lengths: list[int] = Field(default=[256, 512, 1024], min_length=2)
    base_lengths: list[int] = [256]
    samples: int = Field(default=4, ge=1)

    def longscore_base(self) -> list[int]:
        return self.base_lengths


COLOUR = SuiteInfo("Colours", (Task("colour", "subem", 8, "none"),), "256, 512, 1024", "nothing", "none", "none")


@register_suite(ColourSuite, COLOUR)
def build_colour(suite: ColourSuite, seed: int) -> pl.DataFrame:
    tok = get_tokenizer(None)
    colours = ["red", "blue", "green", "amber", "violet", "teal"]
    rows = []
    for length in suite.lengths:
        for i in range(suite.samples):
            colour = colours[(seed + i) % len(colours)]
            filler = " ".join(["The quiet river ran on."] * (length // 8))
            context = f"{filler[: len(filler) // 2]} The colour is {colour}. {filler[len(filler) // 2:]}"
            while tok.count(context) > length:
                context = context[: int(len(context) * 0.95)]
            rows.append({"task": "colour", "sample_id": f"s{i}", "length": length, "context_tokens": tok.count(context),
                         "head": "Read the text.\n\n", "context": context, "tail": "\n\nWhich colour is named?",
                         "question": "Which colour is named?", "answers": [colour], "gold": colour, "metric": "subem",
                         "extractor": "none", "followup": None, "max_tokens": 8, "followup_max_tokens": None})
    return pl.DataFrame(rows)


# ------------------------------------------------------------------ a toy DOLCE suite


class CountingSuite(DolceSuite):
    """Problems whose answer is in one unit (retrieval: lambda = 1)."""

    kind: Literal["toy_counting"] = "toy_counting"
    problems: int = Field(default=12, ge=1)


@register_suite(CountingSuite, SuiteInfo("Counting", (Task("counting", "exact_match", 16, "none"),), "spans", "nothing",
                                        "none", "none"))
def build_counting(suite: CountingSuite, seed: int) -> pl.DataFrame:
    rows = []
    for i in range(suite.problems):
        units = [f"Line {j} says nothing." for j in range(20)]
        units[(seed + 7 * i) % 20] = f"The key of box {i} is {100 + i}."
        rows.append({"task": "counting", "problem_id": f"counting-{i}", "L": 20, "units": units,
                     "question": f"What is the key of box {i}?", "answer": str(100 + i)})
    return pl.DataFrame(rows)


def test_registered_kinds_are_job_suites():
    assert {"toy_colour", "toy_counting", "planted", "helmet_recall"} <= set(SUITES)
    job = parse_job({"name": "t", "suite": {"kind": "toy_colour", "samples": 2}})
    assert isinstance(job.suite, ColourSuite) and job.suite.samples == 2
    assert type(evaluation_for(job)).__name__ == "SweepEvaluation"
    assert type(evaluation_for(parse_job({"name": "t",
                                          "suite": {"kind": "toy_counting"}}))).__name__ == "DolceEvaluation"
    assert job.resolved()["suite"] == {"kind": "toy_colour", "lengths": [256, 512, 1024], "base_lengths": [256],
                                        "samples": 2}


@pytest.mark.parametrize("suite, message", [
    ({"kind": "toy_colour", "samples": 0}, "key 'suite.samples': Input should be greater than or equal to 1"),
    ({"kind": "toy_colour", "colour": "red"},
     "unknown key 'suite.colour' (allowed: kind, lengths, base_lengths, samples)"),
    ({"kind": "toy_nothing"}, "key 'suite.kind': 'toy_nothing' is not one of 'documents', "),
])
def test_a_registered_suite_is_validated_like_the_others(suite, message):
    with pytest.raises(JobSpecError) as err:
        parse_job({"name": "t", "suite": suite}, "job.yaml")
    assert str(err.value).startswith(f"job.yaml: {message}"), str(err.value)


def test_a_config_without_a_family_or_kind_is_refused():
    with pytest.raises(TypeError, match=r"NoFamily: a suite config derives from DolceSuite or SweepSuite"):
        register_suite(type("NoFamily", (ColourSuite.__mro__[-3],), {}), COLOUR)(build_colour)  # SuiteConfig itself
    with pytest.raises(TypeError, match=r"suite 'toy_late': its builder is not callable"):
        SUITES.register("toy_late", (type("Late", (SweepSuite,), {"__annotations__": {"kind": Literal["toy_late"]}}),
                                     None, COLOUR))
    assert "toy_late" not in SUITES


def test_a_suite_registers_with_the_tasks_its_config_allows():
    """Its SuiteInfo (what docs/reference/suites.md says of it) names the tasks of a fixed task list."""

    class Shapes(SweepSuite):
        kind: Literal["toy_shapes"] = "toy_shapes"
        tasks: list[Literal["circle", "square"]] = ["circle", "square"]

    with pytest.raises(TypeError, match=r"suite 'toy_shapes': register it with a SuiteInfo naming its tasks"):
        register_suite(Shapes, None)(build_colour)
    circle = SuiteInfo("Shapes", (Task("circle", "subem", 8, "none"),), "", "", "", "")
    with pytest.raises(TypeError, match=r"its SuiteInfo's tasks \(circle\) are not the tasks its config allows "
                                        r"\(circle, square\)"):
        register_suite(Shapes, circle)(build_colour)
    assert "toy_shapes" not in SUITES


def test_registering_a_suite_kind_twice_is_refused():
    """Issue 38, acceptance 4: one kind, one suite; the same builder registered again (its module
    imported again) is no error."""

    class OtherColour(SweepSuite):
        kind: Literal["toy_colour"] = "toy_colour"

    with pytest.raises(ValueError, match=r"^suite kind 'toy_colour' is registered already \(by "):
        register_suite(OtherColour, COLOUR)(build_colour)
    register_suite(ColourSuite, COLOUR)(build_colour)
    assert SUITES.get("toy_colour") == (ColourSuite, build_colour, COLOUR)
    with pytest.raises(ValueError, match=r"^suite kind 'helmet_recall' is registered already \(by "
                                         r"raylc\.suites\.helmet_recall\)$"):
        SUITES.register("helmet_recall", lazy="somewhere.else")


def test_the_built_in_suites_load_when_a_job_names_them():
    import subprocess
    import sys

    code = ("import sys, raylc.spec; names = ('raylc.suites.helmet_recall', 'raylc.suites.thesis'); "
            "print(*[n in sys.modules for n in names]); "
            "raylc.spec.parse_job({'name': 'x', 'suite': {'kind': 'helmet_recall'}}); "
            "print(*[n in sys.modules for n in names])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False", "True", "False"]


@pytest.mark.ray
def test_a_toy_sweep_runs_end_to_end(ray_session, tmp_path):
    job = parse_job({"name": "toy", "suite": {"kind": "toy_colour"}, "store": {"path": str(tmp_path)},
                     "probe": {"backend": "simulated", "accuracy": 1.0, "half_life_tokens": 1_000_000},
                     "ray": {"actors": 1, "actor_num_cpus": 0.25, "batch_size": 8}})
    run = evaluate(job, "toy", log=lambda m: None)
    assert {s: v.status for s, v in run.manifest.stages.items()} == dict.fromkeys(
        ["build", "infer", "score", "report"], "done")
    scores = pl.read_parquet(tmp_path / "toy" / "score" / "scores.parquet")
    assert scores.height == 12 and scores["score"].to_list() == [1.0] * 12
    tables, _, _ = load_report(str(tmp_path / "toy"))
    assert tables["per_task_length"]["length"].to_list() == [256, 512, 1024]
    assert tables["summary"]["avg_lc"].to_list() == [0.0]  # LongScore over the toy's own base


@pytest.mark.ray
def test_a_toy_dolce_suite_runs_end_to_end(ray_session, tmp_path):
    job = parse_job({"name": "toyd", "suite": {"kind": "toy_counting"}, "store": {"path": str(tmp_path)},
                     "sampling": {"strategy": "enumerate", "lengths": [1, 2, 5, "L"]},
                     "ray": {"actors": 1, "actor_num_cpus": 0.25, "batch_size": 64}})
    run = evaluate(job, "toyd", log=lambda m: None)
    assert {s: v.status for s, v in run.manifest.stages.items()} == dict.fromkeys(
        ["build", "sample", "infer", "score", "fit", "report"], "done")
    problems = pl.read_parquet(tmp_path / "toyd" / "fits" / "problems.parquet")
    assert problems.height == 12 and set(problems["task"]) == {"counting"}
    assert (tmp_path / "toyd" / "report" / "categories.png").stat().st_size > 0

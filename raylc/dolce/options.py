"""DOLCE fit options: one object that travels whole (job file, CLI, sensitivity, ``fit.json``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from raylc.io.job_model import JobModel

POSTERIOR_FIELDS = ("uncertainty", "uncertainty_steps")
"""The fields of the per-problem posterior; fits that compare point estimates (sensitivity) drop them."""
MAX_STEPS = 100_000  #: EM steps at most (the paper runs 10 and 5); more is a typo, not a fit


class FitOptions(JobModel):
    """DOLCE fit settings (Sections 3.1-3.4, Algorithms 1-2).

    ``scenario``: ``auto`` picks COW or PIG per problem by Hartigan's dip test (Section 3.1,
    Appendix H; accuracy-scored problems are COW, unless a task that mixes the two has ten or
    fewer problems on a side: it takes one scenario for all); ``cow`` / ``pig`` force one.
    ``threshold`` binarizes continuous scores for COW. ``em_steps_cow`` / ``em_steps_pig``:
    the paper's 10 / 5 by default; ``em_tol`` > 0 runs to a tolerance instead (at most
    ``em_max_steps``). ``uncertainty`` = ``posterior`` adds the per-problem posterior of
    :mod:`raylc.dolce.uncertainty`, read after ``uncertainty_steps`` EM steps shared by its starts
    (to the tolerance when ``em_tol`` > 0); ``none`` skips it.
    ``not_covered``: what COW's oracle answers on a span without its evidence, fitted per task
    (default) or IDK as Eq. 3 prints it. ``pig_likelihood`` / ``pig_hit_rate``: options of
    :class:`raylc.dolce.pig.PIGFit` (``paper`` / ``mode`` = Algorithm 2; the default likelihood
    is ``binned``, docs/dolce.md says why).
    Each field's description is the help of its ``raylc fit`` / ``raylc sensitivity`` option.
    """

    scenario: Literal["auto", "cow", "pig"] = Field(
        default="auto", description="auto (Hartigan's dip test per problem, Section 3.1), cow or pig.")
    em_steps_cow: int = Field(default=10, ge=1, le=MAX_STEPS, description="EM steps, COW (Algorithm 1).")
    em_steps_pig: int = Field(default=5, ge=1, le=MAX_STEPS, description="EM steps, PIG (Algorithm 2).")
    em_tol: float = Field(default=0.0, ge=0.0, description=(
        "Run the EM until the summed objective of step (b) changes by at most this (nats) between steps, up to "
        "--em-max-steps; 0: the fixed steps above (the paper)."))
    em_max_steps: int = Field(default=1000, ge=1, le=MAX_STEPS, description="EM steps at most when --em-tol > 0.")
    uncertainty: Literal["posterior", "none"] = Field(
        default="posterior", description=(
            "posterior: each problem's category the posterior's most probable, and (lambda, k) the most probable "
            "pair within it, with its confidence, "
            "category probabilities and a 90% lambda interval (raylc.dolce.uncertainty), and share intervals from its "
            "draws; none: the point fit of the EM steps above, share intervals Wilson's over the problems, faster."))
    uncertainty_steps: int = Field(default=200, ge=1, le=MAX_STEPS, description=(
        "EM steps run before the posterior is read, shared by the posterior's EM starts (COW: two starts of 100 "
        "steps each by default; PIG: one of 200); with --em-tol above 0 the runs go to the tolerance instead "
        "(calibrated at 200: docs/figures.md). The reported lambda and k are the most probable pair within the "
        "most probable category."))
    threshold: float = Field(default=0.5, ge=0.0, le=1.0,
                             description="Binarization threshold for COW on continuous scores.")
    not_covered: Literal["fitted", "idk"] = Field(
        default="fitted", description=(
            "COW: the oracle's answer on a span without its evidence: fitted per task (a wrong answer or IDK, as the "
            "probe behaves) or idk (Eq. 3 as printed, for a probe that always follows the IDK instruction)."))
    pig_likelihood: Literal["binned", "paper", "score"] = Field(
        default="binned", description=(
            "PIG: binned (the oracle's mass per 0.1 score bin against the uniform noise), paper (Algorithm 2: rho at "
            "the cell's hit rate) or score (rho at each observed score)."))
    pig_hit_rate: Literal["mode", "mean"] = Field(
        default="mode", description="PIG: mode (Algorithm 2) or mean (option: expected covered fraction).")

    @field_validator("pig_likelihood", mode="before")
    @classmethod
    def _old_name(cls, v):
        """``hit_rate``, Algorithm 2's likelihood under its earlier name (job files and fit.json
        written before), reads as ``paper``."""
        return "paper" if v == "hit_rate" else v

    def point_estimates(self) -> "FitOptions":
        """These options without the posterior (``uncertainty`` = ``none``, the default steps):
        for fits whose only use is their point estimates (the sensitivity grid)."""
        return self.model_copy(update={"uncertainty": "none",
                                       "uncertainty_steps": type(self).model_fields["uncertainty_steps"].default})

    @classmethod
    def check(cls, value: "FitOptions | dict") -> "FitOptions":
        """``value`` (FitOptions, also one built without validation, or a mapping of its
        fields) validated (pydantic's ValidationError, a ValueError, if invalid)."""
        return cls.model_validate(value.model_dump() if isinstance(value, BaseModel) else value)

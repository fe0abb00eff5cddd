"""DOLCE fit options: one object that travels whole (job file, CLI, sensitivity, ``fit.json``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

POSTERIOR_FIELDS = ("uncertainty", "uncertainty_steps")
"""The fields of the per-problem posterior; fits that compare point estimates (sensitivity) drop them."""


class FitOptions(BaseModel):
    """DOLCE fit settings (Sections 3.1-3.4, Algorithms 1-2).

    ``scenario``: ``auto`` picks COW or PIG per problem by Hartigan's dip test (Section 3.1,
    Appendix H; accuracy-scored problems are COW); ``cow`` / ``pig`` force one.
    ``threshold`` binarizes continuous scores for COW. ``em_steps_cow`` / ``em_steps_pig``:
    the paper's 10 / 5 by default; ``em_tol`` > 0 runs to a tolerance instead (at most
    ``em_max_steps``). ``uncertainty`` = ``posterior`` adds the per-problem posterior of
    :mod:`raylc.dolce.uncertainty`, read after ``uncertainty_steps`` EM steps; ``none`` skips it.
    ``pig_likelihood`` / ``pig_hit_rate``: options of
    :class:`raylc.dolce.pig.PIGFit`, off by default (``hit_rate`` / ``mode`` = Algorithm 2).
    Each field's description is the help of its ``raylc fit`` / ``raylc sensitivity`` option.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario: Literal["auto", "cow", "pig"] = Field(
        default="auto", description="auto (Hartigan's dip test per problem, Section 3.1), cow or pig.")
    em_steps_cow: int = Field(default=10, ge=1, description="EM steps, COW (Algorithm 1).")
    em_steps_pig: int = Field(default=5, ge=1, description="EM steps, PIG (Algorithm 2).")
    em_tol: float = Field(default=0.0, ge=0.0, description=(
        "Run the EM until the summed objective of step (b) changes by at most this (nats) between steps, up to "
        "--em-max-steps; 0: the fixed steps above (the paper)."))
    em_max_steps: int = Field(default=1000, ge=1, description="EM steps at most when --em-tol > 0.")
    uncertainty: Literal["posterior", "none"] = Field(
        default="posterior", description=(
            "posterior: per-problem confidence, category probabilities and a 90% lambda interval from the posterior "
            "over the candidate pairs (raylc.dolce.uncertainty), and share intervals that include it; none: today's "
            "speed, intervals from the resampling of problems only."))
    uncertainty_steps: int = Field(default=200, ge=1, description=(
        "EM steps run before the posterior is read (calibrated at 200: docs/figures.md); the reported "
        "lambda and k stay those of the steps above."))
    threshold: float = Field(default=0.5, ge=0.0, le=1.0,
                             description="Binarization threshold for COW on continuous scores.")
    pig_likelihood: Literal["hit_rate", "score", "binned"] = Field(
        default="hit_rate", description="PIG: hit_rate (Algorithm 2), score (option: rho at each observed score) or "
                                        "binned (option: oracle mass per 0.1 score bin).")
    pig_hit_rate: Literal["mode", "mean"] = Field(
        default="mode", description="PIG: mode (Algorithm 2) or mean (option: expected covered fraction).")

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

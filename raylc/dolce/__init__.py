"""DOLCE (Differentiate Our Long Context Evaluation tasks): lambda-k estimation and focus categories."""

from raylc.dolce.categories import CATEGORIES, assign_categories, category_thresholds
from raylc.dolce.cells import CellFit, CellStats
from raylc.dolce.compare import compare_fits, run_sensitivity
from raylc.dolce.cover import cow_cover_prob
from raylc.dolce.cow import COWFit, fit_cow_task
from raylc.dolce.fit import DolceFit, ObservationError, fit_observations, validate_observations
from raylc.dolce.options import FitOptions
from raylc.dolce.pig import (
    PIGFit,
    fit_pig_task,
    pig_bin_density,
    pig_cover_logpmf,
    pig_cover_pmf,
    pig_density,
    pig_pmf_mode,
)
from raylc.dolce.scenario import select_scenarios

__all__ = [
    "CATEGORIES",
    "COWFit",
    "CellFit",
    "CellStats",
    "DolceFit",
    "FitOptions",
    "ObservationError",
    "PIGFit",
    "assign_categories",
    "category_thresholds",
    "compare_fits",
    "cow_cover_prob",
    "fit_cow_task",
    "fit_observations",
    "fit_pig_task",
    "pig_bin_density",
    "pig_cover_logpmf",
    "pig_cover_pmf",
    "pig_density",
    "pig_pmf_mode",
    "run_sensitivity",
    "select_scenarios",
    "validate_observations",
]

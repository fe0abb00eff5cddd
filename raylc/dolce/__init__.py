"""DOLCE (Differentiate Our Long Context Evaluation tasks): lambda-k estimation and focus categories."""

from raylc import lazy_exports

#: public name -> its module; imported on first use, so that importing one submodule (the
#: job spec imports the fit options) does not load the rest
_LAZY = {
    "CATEGORIES": "raylc.dolce.categories",
    "COWFit": "raylc.dolce.cow",
    "CellFit": "raylc.dolce.cells",
    "CellStats": "raylc.dolce.cells",
    "DolceFit": "raylc.dolce.fit",
    "FitOptions": "raylc.dolce.options",
    "ObservationError": "raylc.dolce.fit",
    "PIGFit": "raylc.dolce.pig",
    "assign_categories": "raylc.dolce.categories",
    "category_thresholds": "raylc.dolce.categories",
    "compare_fits": "raylc.dolce.sensitivity",
    "cow_cover_prob": "raylc.dolce.cover",
    "fit_cow_task": "raylc.dolce.cow",
    "fit_observations": "raylc.dolce.fit",
    "fit_pig_task": "raylc.dolce.pig",
    "pig_bin_density": "raylc.dolce.pig",
    "pig_cover_logpmf": "raylc.dolce.pig",
    "pig_cover_pmf": "raylc.dolce.pig",
    "pig_density": "raylc.dolce.pig",
    "pig_pmf_mode": "raylc.dolce.pig",
    "run_sensitivity": "raylc.dolce.sensitivity",
    "select_scenarios": "raylc.dolce.scenario",
    "validate_observations": "raylc.dolce.fit",
}
__all__ = sorted(_LAZY)

__getattr__ = lazy_exports(__name__, _LAZY)

"""DOLCE (Differentiate Our Long Context Evaluation tasks): lambda-k estimation and focus categories."""

from raylc.dolce.categories import assign_categories, category_thresholds
from raylc.dolce.cover import cow_cover_prob
from raylc.dolce.cow import COWFit, fit_cow_task

__all__ = ["COWFit", "assign_categories", "category_thresholds", "cow_cover_prob", "fit_cow_task"]

"""Metrics (vectorized over frames of predictions), answer extraction, and COW outcomes."""

from raylc.scoring.extract import EXTRACTORS, IDK_PATTERNS, TABLE4_EXTRACTOR, is_idk
from raylc.scoring.metrics import METRICS, normalize_squad, score_frame
from raylc.scoring.observations import OBSERVATION_SCHEMA, score_spans

__all__ = [
    "EXTRACTORS",
    "IDK_PATTERNS",
    "METRICS",
    "OBSERVATION_SCHEMA",
    "TABLE4_EXTRACTOR",
    "is_idk",
    "normalize_squad",
    "score_frame",
    "score_spans",
]

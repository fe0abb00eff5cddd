"""Metrics (vectorized over frames of predictions), answer extraction, and COW outcomes."""

from raylc import lazy_exports

#: public name -> its module; imported on first use, so that importing one submodule (the
#: job spec imports the fit options) does not load the rest
_LAZY = {
    "EXTRACTORS": "raylc.scoring.extract",
    "IDK_PATTERNS": "raylc.scoring.extract",
    "METRICS": "raylc.scoring.metrics",
    "OBSERVATION_SCHEMA": "raylc.scoring.observations",
    "TABLE4_EXTRACTOR": "raylc.scoring.extract",
    "is_idk": "raylc.scoring.extract",
    "normalize_squad": "raylc.scoring.metrics",
    "score_frame": "raylc.scoring.metrics",
    "score_spans": "raylc.scoring.observations",
}
__all__ = sorted(_LAZY)

__getattr__ = lazy_exports(__name__, _LAZY)

"""Suites: a config model and a builder each, registered by kind (:mod:`raylc.suites.registry`).

Importing this package registers the built-in suites."""

from raylc.suites import documents, helmet_recall, layouts, longbench, longbench100, longbench_v2, planted, thesis  # noqa: F401 (registers)
from raylc.suites.planted import PlantedSuite
from raylc.suites.registry import SUITES, DolceSuite, SuiteConfig, SweepSuite, register_suite

__all__ = ["SUITES", "DolceSuite", "PlantedSuite", "SuiteConfig", "SweepSuite", "register_suite"]

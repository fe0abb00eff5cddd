"""Suites: a config model and a builder each, registered by kind (:mod:`raylc.suites.registry`).

The built-in suites are registered lazily: a kind's module is imported when a job names it."""

from raylc.suites.planted import PlantedSuite
from raylc.suites.registry import SUITES, DolceSuite, SuiteConfig, SweepSuite, register_suite

for _kind, _module in (("documents", "documents"), ("helmet_recall", "helmet_recall"), ("layouts", "layouts"),
                       ("longbench", "longbench"),
                       ("longbench100", "longbench100"), ("longbench_v2", "longbench_v2"),
                       ("thesis_units", "thesis")):
    SUITES.register(_kind, lazy=f"raylc.suites.{_module}")

__all__ = ["SUITES", "DolceSuite", "PlantedSuite", "SuiteConfig", "SweepSuite", "register_suite"]

"""The length-sweep family: length-controlled suites, LongScore, their stages, plan and report."""

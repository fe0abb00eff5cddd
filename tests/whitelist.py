"""What the dead-code check (vulture in ``make lint``, ``[tool.vulture]`` in pyproject.toml) must not
report although nothing in raylc or its tests calls it: a plug-in entry point that no decorator or
name of ``[tool.vulture]`` marks. Today none, and one leftover pending below."""

from raylc.dolce.report import write_report

# PENDING (issue 38): the DOLCE report module is rewritten in parallel; the report stage now writes
# through RunFolder.write_outputs and write_report is no longer called. Remove with write_report.
write_report  # noqa: B018

"""What the dead-code check (vulture in ``make lint``, ``[tool.vulture]`` in pyproject.toml) must not
report although nothing in raylc or its tests calls it: a plug-in entry point that no decorator or
name of ``[tool.vulture]`` marks. Today none."""

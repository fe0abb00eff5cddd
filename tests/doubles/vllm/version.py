"""Version of the vLLM release this double stands in for (real: ``vllm/version.py`` reads ``_version.py``)."""

__version__ = "0.33.0"
__version_tuple__ = (0, 33, 0)

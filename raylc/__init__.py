"""raylc: distributed long-context LLM evaluation on Ray."""

__version__ = "0.1.0"


def lazy_exports(package: str, names: dict[str, str]):
    """A package's ``__getattr__`` (PEP 562) that imports each public name's module on first
    use (``names``: public name -> module), so that importing one submodule loads no other."""
    import importlib

    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(names[name]), name)

    return __getattr__

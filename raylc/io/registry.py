"""The one registry of named plug-ins: suites (``suite.kind``) and backends (``probe.backend``).

A :class:`Registry` maps names to entries. It refuses a name registered twice with another
entry, checks an entry when it is registered (its ``check``), and loads lazily: a name can be
registered as the module that registers it (``lazy="raylc.suites.thesis"``), which is imported
the first time the name is looked up, so loading a job imports only the plug-ins it names.
"""

from __future__ import annotations

import importlib
import threading
from typing import Callable, Generic, Iterator, Optional, TypeVar, Union

T = TypeVar("T")


class _Lazy(str):
    """A name's placeholder: the module whose import registers it."""


def _module_of(entry: object) -> Optional[str]:
    """The module that defines an entry (a class, a function, or a tuple whose first item is one)."""
    first = entry[0] if isinstance(entry, tuple) and entry else entry
    return getattr(first, "__module__", None) or getattr(type(first), "__module__", None)


def _same(a: object, b: object) -> bool:
    """The same entry, or the same definition imported again (same module and qualified names)."""
    def key(entry: object) -> tuple:
        items = entry if isinstance(entry, tuple) else (entry,)
        return tuple((_module_of(x), getattr(x, "__qualname__", None) or type(x).__qualname__) for x in items)

    return a is b or key(a) == key(b)


def _replaces(current: object, entry: object) -> bool:
    """Whether ``entry`` may take the place of ``current``: its placeholder, or itself again."""
    return current == _module_of(entry) if isinstance(current, _Lazy) else _same(current, entry)


class Registry(Generic[T]):
    """Named entries of one kind (``what``: ``suite``, ``backend``), each checked by ``check(name,
    entry)`` (which raises TypeError) when registered or, when registered lazily, when loaded."""

    def __init__(self, what: str, check: Callable[[str, T], None]):
        self.what, self._check = what, check
        self._entries: dict[str, Union[T, _Lazy]] = {}
        self._lock = threading.RLock()

    def register(self, name: str, entry: Optional[T] = None, *, lazy: Optional[str] = None) -> None:
        """Register ``entry`` under ``name``, or (``lazy``) the module whose import registers it.
        A name already registered with another entry is a ValueError; the same entry again (the
        module imported again) is a no-op, and a concrete entry replaces its own placeholder."""
        if (entry is None) == (lazy is None):
            raise TypeError("register takes an entry or lazy=<module>, not both")
        with self._lock:
            current = self._entries.get(name)
            if lazy is not None:
                if current is None:
                    self._entries[name] = _Lazy(lazy)
                elif current != lazy and _module_of(current) != lazy:
                    raise ValueError(f"{self.what} {name!r} is registered already (by {self._origin(current)})")
                return
            self._check(name, entry)  # type: ignore[arg-type]
            if current is not None and not _replaces(current, entry):
                raise ValueError(f"{self.what} {name!r} is registered already (by {self._origin(current)})")
            self._entries[name] = entry  # type: ignore[assignment]

    @staticmethod
    def _origin(entry: object) -> str:
        return str(entry) if isinstance(entry, _Lazy) else f"{_module_of(entry)}"

    def get(self, name: str) -> T:
        """The entry of ``name``, importing its module first when it was registered lazily; a
        KeyError naming the known names when there is none."""
        entry = self._entries.get(name)
        if entry is None:
            raise KeyError(f"unknown {self.what} {name!r} (known: {', '.join(self)})")
        if isinstance(entry, _Lazy):
            importlib.import_module(entry)
            entry = self._entries[name]
            if isinstance(entry, _Lazy):
                raise TypeError(f"{self.what} {name!r}: importing {entry} did not register it")
        return entry

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries  # a list or mapping names nothing

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

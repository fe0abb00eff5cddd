"""How a user-supplied name becomes a path segment: :func:`path_segment`, the one rule.

Names from users end up in paths: a task becomes the hive partition ``infer/task=<task>/``
of every run, and a run id the run's folder ``<store>/<run_id>/``. raylc **refuses** a name
that is not safe, with one line naming the field (and the file and row when there is one);
it never rewrites one. A name is safe when it is

* text in Unicode NFC form, non-empty, at most :data:`MAX_BYTES` bytes in UTF-8;
* made of letters, digits and combining marks of any script (Unicode categories L, N, M:
  ``数学``, ``résumé``, ``हिन्दी`` are names), space, ``.``, ``_`` and ``-``;
* not starting with ``.`` (no ``.``, ``..`` nor hidden folders, which readers skip) and
  neither starting nor ending with a space.

Why refuse rather than encode (e.g. percent-encoding everything else):

* a safe name is its own path segment, so the partition value that raylc, Polars, DuckDB
  or pyarrow read back from ``task=<value>`` is the name itself, byte for byte: hive
  readers percent-decode values (``%``), some turn ``+`` into a space and split at ``=``,
  and none of those characters is allowed, so no reader needs to know about an encoding;
* the refused characters are those that mean something to a path, a URI or a hive
  partition (``/``, ``\\``, NUL and control characters, ``= % + : * ? " < > | #`` ...),
  which benchmark task names and run ids do not need; non-ASCII letters are kept, so CJK
  and other scripts need no renaming;
* NFC is required so that one name has one spelling on every filesystem (macOS's HFS+
  stores names decomposed, which would read back as another string);
* the byte limit keeps ``task=<name>`` under the 255-byte segment limit of common
  filesystems (a CJK character is 3 bytes: about 66 of them).

Two names that differ only in case (``QA`` and ``qa``) are two safe names, but one folder on
a case-insensitive filesystem (macOS, Windows): :func:`case_clash` finds such a pair, which
the suites refuse among their tasks.
"""

from __future__ import annotations

import unicodedata
from typing import Any, Iterable, Optional

__all__ = ["CASE_CLASH_WHY", "MAX_BYTES", "RULE", "UnsafeName", "case_clash", "check_name", "path_segment"]

MAX_BYTES = 200
_EXTRA = frozenset("._- ")
RULE = (f"letters and digits of any script, space, . _ -; no leading '.', no leading or trailing space; "
        f"<= {MAX_BYTES} bytes; NFC")


class UnsafeName(ValueError):
    """A user-supplied name that cannot be a path segment; the message is one line."""


def check_name(value: Any) -> Optional[str]:
    """Why ``value`` is not a safe name (see the module docstring), or None when it is."""
    if not isinstance(value, str):
        return f"not text ({type(value).__name__})"
    if not value:
        return "empty"
    for ch in value:
        if ch not in _EXTRA and unicodedata.category(ch)[0] not in "LNM":
            return f"contains {ch!r}"
    if value[0] == ".":
        return "starts with '.'"
    if value[0] == " " or value[-1] == " ":
        return "leading or trailing space"
    if unicodedata.normalize("NFC", value) != value:
        return "not in Unicode NFC form"
    if len(value.encode("utf-8")) > MAX_BYTES:
        return f"longer than {MAX_BYTES} UTF-8 bytes"
    return None


def path_segment(value: Any, field: str, row: Optional[object] = None, source: Optional[str] = None) -> str:
    """``value`` itself when it is a safe path segment; else :class:`UnsafeName` with one line
    naming ``source`` (a file), ``row`` (1-based) and ``field``, e.g.
    ``docs.jsonl: row 3: task '../../x' is not a safe name (contains '/'; allowed: ...)``."""
    why = check_name(value)
    if why is None:
        return value
    where = "".join(f"{part}: " for part in (source, None if row is None else f"row {row}") if part)
    shown = repr(value) if not isinstance(value, str) or len(value) <= 80 else repr(value[:77] + "...")
    raise UnsafeName(f"{where}{field} {shown} is not a safe name ({why}; allowed: {RULE})")


#: Why two task names may not differ only in case, for the error that names them.
CASE_CLASH_WHY = "their infer/task=<task> folders would be one on a case-insensitive filesystem"


def case_clash(names: Iterable[str]) -> Optional[tuple[str, str]]:
    """The first two of ``names`` (in order) that differ only in case, which would be one folder
    on a case-insensitive filesystem; None when there are none (equal names do not clash)."""
    seen: dict[str, str] = {}
    for name in names:
        first = seen.setdefault(name.casefold(), name)
        if first != name:
            return first, name
    return None

"""The store's errors, apart from the store (:mod:`raylc.io.store`), so that who reports them need not import it,
and the one wording of why a file could not be parsed."""


class StoreError(RuntimeError):
    """A table that is missing, unreadable or corrupt; the message names the path."""


class StoreUnavailable(StoreError):
    """The store could not be reached or refused an operation (network, permissions)."""


def why_unreadable(exc: BaseException) -> str:
    """Why a parser (JSON, YAML) gave up, in a few words for a one-line error: nesting past
    Python's recursion limit, else the exception's first line (an integer past Python's 4,300
    digits says so)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]

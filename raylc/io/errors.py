"""The store's errors, apart from the store (:mod:`raylc.io.store`), so that who reports them need not import it."""


class StoreError(RuntimeError):
    """A table that is missing, unreadable or corrupt; the message names the path."""


class StoreUnavailable(StoreError):
    """The store could not be reached or refused an operation (network, permissions)."""

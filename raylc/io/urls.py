"""The one check of an http(s) address a user gives (the Ray dashboard of ``raylc submit``, an
OpenAI-compatible ``base_url``), and the one reading of a Ray cluster address, before anything
is contacted."""

from __future__ import annotations

from urllib.parse import urlsplit


def check_http_url(url: str, example: str) -> None:
    """A :class:`ValueError` (one line, ending ``e.g. <example>``) unless ``url`` is an http(s)
    URL with a host and a port in range, without white space or control characters, that httpx
    (the client that will use it) parses."""
    import httpx

    try:
        parts = urlsplit(url)
        _ = parts.port  # a port out of range or not a number raises
        httpx.URL(url)  # a host that is not IDNA, a control character
    except (ValueError, httpx.InvalidURL) as exc:
        raise ValueError(f"not a URL ({exc}); e.g. {example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(
            c.isspace() or not c.isprintable() for c in url):
        raise ValueError(f"not an http(s) URL with a host; e.g. {example}")


def ray_host_port(address: str) -> tuple[str, str]:
    """The host (brackets kept) and port of a Ray address, ``host:port`` or ``ray://host:port``
    (a trailing ``/`` ignored); either is empty when the address names none (``ray://``)."""
    rest = address.split("://", 1)[-1].strip().rstrip("/")
    host, sep, port = rest.rpartition(":")
    return (host, port) if sep else (rest, "")

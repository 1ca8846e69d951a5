"""HTTP-level request checks for the MCP endpoint: origin, host, accept and content type."""

from __future__ import annotations

import functools
from collections.abc import Iterable

__all__ = ["accepts_mcp_post", "accepts_event_stream", "is_json_content_type", "loopback_origins"]


def loopback_origins(address: str, port: int) -> tuple[frozenset[str], frozenset[str]]:
    """The origins and Host values this server answers to: its own loopback authority.

    A browser page on any other origin is refused (DNS-rebinding protection).
    """
    bound = f"[{address}]" if ":" in address else address
    hosts = {f"{name}:{port}" for name in {bound, "127.0.0.1", "localhost", "[::1]"}}
    origins = frozenset(f"http://{host}" for host in hosts)
    return origins, frozenset(hosts)


def _media_ranges(values: Iterable[str]) -> set[str]:
    ranges: set[str] = set()
    for value in values:
        for item in value.split(","):
            media, _, params = item.partition(";")
            media = media.strip().lower()
            # A quality of zero means "not acceptable" (RFC 9110).
            quality = [p.strip() for p in params.split(";") if p.strip().startswith("q=")]
            if quality and quality[0][2:].strip() in {"0", "0.0", "0.00", "0.000"}:
                continue
            if media:
                ranges.add(media)
    return ranges


def _admits(ranges: set[str], media_type: str) -> bool:
    major = media_type.split("/", 1)[0]
    return bool({"*/*", f"{major}/*", media_type} & ranges)


def accepts_mcp_post(accept_values: Iterable[str]) -> bool:
    """POST must admit both JSON and SSE replies, in any order, wildcards honoured."""
    return _accepts_post(tuple(accept_values))


# A client sends the same Accept header on every request: parse each distinct one once.
@functools.lru_cache(maxsize=64)
def _accepts_post(accept_values: tuple[str, ...]) -> bool:
    ranges = _media_ranges(accept_values)
    return _admits(ranges, "application/json") and _admits(ranges, "text/event-stream")


def accepts_event_stream(accept_values: Iterable[str]) -> bool:
    return _admits(_media_ranges(accept_values), "text/event-stream")


def is_json_content_type(value: str | None) -> bool:
    if value is None:
        return False
    return value.split(";", 1)[0].strip().lower() == "application/json"

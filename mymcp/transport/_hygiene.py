"""HTTP-level request checks for the MCP endpoint: origin, host, accept and content type."""

from __future__ import annotations

import functools
import re
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


# A quality value as RFC 9110 writes one: 0 to 1, at most three decimals.
_QUALITY = re.compile(r"(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)")
# One media range of a field: up to the next comma outside a quoted string (a parameter
# value may quote a comma), and each of its parameters, quoted values kept whole. The
# alternatives start with different characters, so matching stays linear.
_RANGE = re.compile(r'(?:[^,"]|"(?:[^"\\]|\\.)*(?:"|$))+')
_PARAMETER = re.compile(r';[ \t]*([^=;\s]*)[ \t]*(?:=[ \t]*("(?:[^"\\]|\\.)*"?|[^;]*))?')


def _media_ranges(values: Iterable[str]) -> dict[str, float]:
    """Each media range the Accept values name, with its quality (the highest, where a
    range is named twice). A malformed quality is read as none, which means 1."""
    ranges: dict[str, float] = {}
    for value in values:
        for item in _RANGE.findall(value):
            media, semicolon, parameters = item.partition(";")
            media = media.strip().lower()
            if not media:
                continue
            quality = 1.0
            for name, text in _PARAMETER.findall(semicolon + parameters):
                # Parameter names are case-insensitive: `Q=0` refuses as `q=0` does.
                if name.lower() == "q" and _QUALITY.fullmatch(text.strip()):
                    quality = float(text)
                    break
            ranges[media] = max(quality, ranges.get(media, 0.0))
    return ranges


def _admits(ranges: dict[str, float], media_type: str) -> bool:
    """Whether the most specific range naming `media_type` accepts it: a type refused by
    name (quality 0) stays refused whatever wildcard also names it."""
    major = media_type.split("/", 1)[0]
    for candidate in (media_type, f"{major}/*", "*/*"):
        if candidate in ranges:
            return ranges[candidate] > 0
    return False


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

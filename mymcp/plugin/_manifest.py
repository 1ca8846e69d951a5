"""Manifest v1 entry points: from bytes, from a plugin's own dict, or from a file.

The field rules live in `_manifest_rules`; this module handles the resource itself
(size bound, strict UTF-8, JSON without duplicate keys or non-finite numbers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from mymcp._safefile import SafeFileError, as_error, read_safe_file
from mymcp._strictjson import StrictJsonError, StrictJsonReason, load_strict_json
from mymcp.errors import Location, ManifestError
from mymcp.plugin._definition import PluginDefinition
from mymcp.plugin._manifest_rules import (
    MAX_MANIFEST_BYTES,
    definition_from_document,
    is_semver,
)

__all__ = [
    "MAX_MANIFEST_BYTES",
    "is_semver",
    "load_manifest",
    "manifest_from_mapping",
    "parse_manifest",
]

_MAX_JSON_DEPTH: Final = 64


# Strict-JSON refusal reasons in the manifest error vocabulary.
_JSON_CODES: Final = {
    StrictJsonReason.TOO_LARGE: "manifest_resource_too_large",
    StrictJsonReason.INVALID_UTF8: "manifest_resource_invalid_utf8",
    StrictJsonReason.DUPLICATE_KEY: "manifest_resource_duplicate_key",
}


def parse_manifest(data: bytes, source: Path | None = None) -> PluginDefinition:
    """Parse manifest-v1 bytes: at most 64 KiB of strict UTF-8 JSON, then the schema.

    Duplicate object keys, NaN and infinities are rejected. Raises `ManifestError`, whose
    location names `source` when given.
    """
    if not isinstance(data, bytes | bytearray):
        raise ManifestError.at("manifest_resource_invalid", detail="expected bytes")
    try:
        try:
            document = load_strict_json(
                data, max_bytes=MAX_MANIFEST_BYTES, max_depth=_MAX_JSON_DEPTH
            )
        except StrictJsonError as exc:
            code = _JSON_CODES.get(exc.reason, "manifest_resource_invalid_json")
            detail = exc.detail
            if exc.reason is StrictJsonReason.DUPLICATE_KEY:
                detail = _repeated_key(data)
            raise ManifestError(code, location=exc.location, detail=detail) from None
        return definition_from_document(document)
    except ManifestError as exc:
        if source is not None:
            exc.locate(Location(source=str(source)))
        raise


class _Repeated(Exception):
    """Stops decoding at the first object that repeats a key."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refuse_repeats(items: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in items:
        if key in seen:
            raise _Repeated(key)
        seen.add(key)
    return dict(items)


def _repeated_key(data: bytes) -> str | None:
    """Which key an object of the manifest repeats (the operator's own file, so naming
    it is safe), for a document strict decoding refused for that. Shown as a JSON
    string, so that a key holding a backslash and one holding an invisible character
    never look alike."""
    try:
        json.loads(data, object_pairs_hook=_refuse_repeats)
    except _Repeated as repeated:
        return f"an object gives the key {json.dumps(repeated.key[:100])} more than once"
    except (ValueError, RecursionError):
        pass
    return None


def _plain_json(value: object, depth: int) -> Any:
    """A plain JSON copy of `value` (dicts, lists, str, int, finite float, bool, None)."""
    if depth > _MAX_JSON_DEPTH:
        raise ManifestError.at("manifest_resource_invalid")
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise ManifestError.at("manifest_resource_invalid")
        return {key: _plain_json(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_json(item, depth + 1) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ManifestError.at("manifest_resource_invalid")
    if value is None or isinstance(value, str | int | float):
        return value
    raise ManifestError.at("manifest_resource_invalid")


def manifest_from_mapping(document: Mapping[str, Any]) -> PluginDefinition:
    """Build a definition from an in-memory manifest (e.g. a plugin's own dict).

    The same rules as `parse_manifest` apply; values must be plain JSON types.
    """
    if not isinstance(document, Mapping):
        raise ManifestError.at("manifest_root_invalid")
    return definition_from_document(_plain_json(document, 0))


def load_manifest(path: Path) -> PluginDefinition:
    """Read `path` with the safe-file rules (64 KiB bound) and parse it as manifest v1.

    A file that cannot be read safely is `manifest_resource_<reason>` with the safe-file
    reason (`manifest_resource_unsafe_permissions`, ...), named like the server names it
    (`external_manifest_<reason>`).
    """
    try:
        data = read_safe_file(Path(path), max_bytes=MAX_MANIFEST_BYTES)
    except SafeFileError as exc:
        raise as_error(exc, ManifestError, "manifest_resource_") from None
    return parse_manifest(data, Path(path))

"""The field rules of manifest v1, applied to an already decoded JSON document.

Nothing is coerced or defaulted: unknown, missing or mistyped fields fail with a stable
`ManifestError` code whose message names at most a manifest location, never a value.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Final, NoReturn

from mymcp.errors import ManifestError
from mymcp.plugin._definition import (
    AuthorityDeclaration,
    CapabilityDeclaration,
    ConfigurationDeclaration,
    Consent,
    FilesystemClass,
    HostApiRange,
    PluginDefinition,
    ToolEffects,
)
from mymcp.plugin._identity import is_capability_local_id, is_plugin_id

__all__ = [
    "MANIFEST_MESSAGES",
    "MAX_MANIFEST_BYTES",
    "definition_from_document",
    "fail",
    "is_semver",
    "manifest_error",
]

MAX_MANIFEST_BYTES: Final = 65536
_MAX_CAPABILITIES: Final = 64
_MAX_SECRET_REFERENCES: Final = 32
_MAX_CONFIG_PROPERTIES: Final = 32
_MAX_CONFIG_DEPTH: Final = 4


MANIFEST_MESSAGES: Final[dict[str, str]] = {
    "manifest_resource_invalid": "MyMCP plugin manifest resource is invalid",
    "manifest_resource_too_large": "MyMCP plugin manifest exceeds 65536 bytes",
    "manifest_resource_invalid_utf8": "MyMCP plugin manifest is not valid UTF-8",
    "manifest_resource_invalid_json": "MyMCP plugin manifest is not valid JSON",
    "manifest_resource_duplicate_key": "MyMCP plugin manifest repeats a JSON object key",
    "manifest_root_invalid": "MyMCP plugin manifest root is not a JSON object",
    "manifest_unknown_field": "MyMCP plugin manifest has an unknown field",
    "manifest_missing_field": "MyMCP plugin manifest lacks a required field",
    "manifest_invalid_field": "MyMCP plugin manifest has an invalid field",
    "manifest_version_unsupported": "MyMCP plugin manifest version is not supported",
    "manifest_capability_kind_unsupported": "MyMCP plugin manifest capability kind is unsupported",
    "manifest_duplicate_capability": "MyMCP plugin manifest declares a capability twice",
    "manifest_duplicate_secret_reference": "MyMCP plugin manifest repeats a secret reference",
    "manifest_configuration_schema_invalid": "MyMCP plugin configuration schema is invalid",
    "manifest_authority_invalid": "MyMCP plugin manifest authority is invalid",
    "host_api_incompatible": "MyMCP plugin does not support this host API version",
    "definition_manifest_mismatch": "MyMCP plugin definition does not equal its manifest",
    "contribution_plugin_mismatch": "MyMCP plugin contribution names another plugin",
    "contribution_version_mismatch": "MyMCP plugin contribution version does not match",
    "undeclared_capability": "MyMCP plugin contribution selects an undeclared capability",
    "duplicate_selected_capability": "MyMCP plugin contribution selects a capability twice",
    "capability_order_mismatch": "MyMCP plugin contribution breaks the declaration order",
    "capability_metadata_mismatch": "MyMCP plugin tool effects or consent differ from the manifest",
}


def manifest_error(code: str, where: str | None = None) -> ManifestError:
    """The error for `code`; `where` is a fixed manifest location such as `capabilities`."""
    message = MANIFEST_MESSAGES[code]
    return ManifestError(code, message if where is None else f"{message} (at {where})")


def fail(code: str, where: str | None = None) -> NoReturn:
    raise manifest_error(code, where) from None


_SEMVER: Final = re.compile(
    r"(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)"
    r"(?:-(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)


def is_semver(value: object) -> bool:
    """Strict SemVer 2.0.0 (no `v` prefix, no leading zeros), at most 64 characters."""
    return isinstance(value, str) and len(value) <= 64 and bool(_SEMVER.fullmatch(value))


def _is_text(value: object, maximum: int) -> bool:
    """A non-empty string of at most `maximum` characters free of control characters."""
    if not isinstance(value, str) or not 1 <= len(value) <= maximum:
        return False
    return all(unicodedata.category(char) not in ("Cc", "Cs", "Zl", "Zp") for char in value)


def _object(value: object, required: set[str], optional: set[str], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        fail("manifest_invalid_field", where)
    if not set(value) <= required | optional:
        fail("manifest_unknown_field", where)
    missing = required - set(value)
    if missing:  # name the missing field: it comes from the schema, not from the file
        name = min(missing)
        fail("manifest_missing_field", name if where == "top level" else f"{where}.{name}")
    return value


def _int(value: object, low: int, high: int, where: str) -> int:
    if type(value) is not int or not low <= value <= high:
        fail("manifest_invalid_field", where)
    return value


def _bool(value: object, where: str) -> bool:
    if type(value) is not bool:
        fail("manifest_invalid_field", where)
    return value


def _requires(value: object) -> HostApiRange:
    host_api = _object(value, {"host_api"}, set(), "requires")["host_api"]
    bounds = _object(host_api, {"min", "max"}, set(), "requires.host_api")
    minimum = _int(bounds["min"], 1, 255, "requires.host_api.min")
    maximum = _int(bounds["max"], 1, 255, "requires.host_api.max")
    if minimum > maximum:
        fail("manifest_invalid_field", "requires.host_api")
    return HostApiRange(minimum=minimum, maximum=maximum)


_CAPABILITY_FIELDS: Final = {
    "kind",
    "id",
    "version",
    "read_only",
    "destructive",
    "idempotent",
    "open_world",
    "consent",
}


def _capability(value: object) -> CapabilityDeclaration:
    entry = _object(value, _CAPABILITY_FIELDS, set(), "capabilities")
    if not isinstance(entry["kind"], str):
        fail("manifest_invalid_field", "capabilities.kind")
    if entry["kind"] != "tool":
        fail("manifest_capability_kind_unsupported", "capabilities.kind")
    if not is_capability_local_id(entry["id"]):
        fail("manifest_invalid_field", "capabilities.id")
    if not is_semver(entry["version"]):
        fail("manifest_invalid_field", "capabilities.version")
    effects = ToolEffects(
        read_only=_bool(entry["read_only"], "capabilities.read_only"),
        destructive=_bool(entry["destructive"], "capabilities.destructive"),
        idempotent=_bool(entry["idempotent"], "capabilities.idempotent"),
        open_world=_bool(entry["open_world"], "capabilities.open_world"),
    )
    if entry["consent"] not in ("none", "per_call"):
        fail("manifest_invalid_field", "capabilities.consent")
    return CapabilityDeclaration(
        "tool", entry["id"], entry["version"], effects, Consent(entry["consent"])
    )


def _capabilities(value: object) -> tuple[CapabilityDeclaration, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= _MAX_CAPABILITIES:
        fail("manifest_invalid_field", "capabilities")
    declarations: list[CapabilityDeclaration] = []
    seen: set[tuple[str, str]] = set()
    for item in value:
        declaration = _capability(item)
        key = (declaration.kind, declaration.local_id)
        if key in seen:
            fail("manifest_duplicate_capability", "capabilities")
        seen.add(key)
        declarations.append(declaration)
    return tuple(declarations)


_SCALAR_TYPES: Final = frozenset({"string", "integer", "number", "boolean", "null"})


def _schema_node(node: object, depth: int, budget: list[int]) -> None:
    """Check one node of the configuration-schema subset; `budget` counts properties left."""
    if not isinstance(node, dict) or depth > _MAX_CONFIG_DEPTH:
        fail("manifest_configuration_schema_invalid", "configuration.schema")
    kind = node.get("type")
    if kind == "object":
        keys_ok = (
            {"type", "properties", "additionalProperties"}
            <= set(node)
            <= {
                "type",
                "properties",
                "additionalProperties",
                "required",
            }
        )
        properties = node.get("properties")
        if not keys_ok or not isinstance(properties, dict):
            fail("manifest_configuration_schema_invalid", "configuration.schema")
        if node["additionalProperties"] is not False:
            fail("manifest_configuration_schema_invalid", "configuration.schema")
        budget[0] -= len(properties)
        if budget[0] < 0 or not all(_is_text(name, 64) for name in properties):
            fail("manifest_configuration_schema_invalid", "configuration.schema")
        required = node.get("required", [])
        if (
            not isinstance(required, list)
            or not all(isinstance(name, str) and name in properties for name in required)
            or len(set(required)) != len(required)
        ):
            fail("manifest_configuration_schema_invalid", "configuration.schema")
        for child in properties.values():
            _schema_node(child, depth + 1, budget)
    elif kind == "array":
        if set(node) != {"type", "items"}:
            fail("manifest_configuration_schema_invalid", "configuration.schema")
        _schema_node(node["items"], depth + 1, budget)
    elif not (isinstance(kind, str) and kind in _SCALAR_TYPES and set(node) == {"type"}):
        fail("manifest_configuration_schema_invalid", "configuration.schema")


def _configuration(value: object) -> ConfigurationDeclaration:
    table = _object(value, {"schema_version", "schema"}, set(), "configuration")
    _int(table["schema_version"], 1, 1, "configuration.schema_version")
    schema = table["schema"]
    if not isinstance(schema, dict) or schema.get("type") != "object":
        fail("manifest_configuration_schema_invalid", "configuration.schema")
    _schema_node(schema, 1, [_MAX_CONFIG_PROPERTIES])
    return ConfigurationDeclaration(schema_version=1, schema=schema)


def _secret_references(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > _MAX_SECRET_REFERENCES:
        fail("manifest_invalid_field", "secret_references")
    if not all(is_capability_local_id(slot) for slot in value):
        fail("manifest_invalid_field", "secret_references")
    if len(set(value)) != len(value):
        fail("manifest_duplicate_secret_reference", "secret_references")
    return tuple(value)


_FILESYSTEM_CLASSES: Final = frozenset(member.value for member in FilesystemClass)


def _authority(value: object) -> AuthorityDeclaration:
    if not isinstance(value, dict) or set(value) != {"filesystem", "network"}:
        fail("manifest_authority_invalid", "authority")
    classes = value["filesystem"]
    if (
        not isinstance(classes, list)
        or not all(isinstance(item, str) and item in _FILESYSTEM_CLASSES for item in classes)
        or len(set(classes)) != len(classes)
        or type(value["network"]) is not bool
    ):
        fail("manifest_authority_invalid", "authority")
    return AuthorityDeclaration(
        filesystem=tuple(FilesystemClass(item) for item in classes), network=value["network"]
    )


_REQUIRED_FIELDS: Final = {
    "manifest_version",
    "id",
    "title",
    "description",
    "version",
    "requires",
    "capabilities",
    "configuration",
    "secret_references",
    "data_schema_version",
    "authority",
}


def definition_from_document(document: object) -> PluginDefinition:
    """Apply every manifest-v1 field rule to a decoded JSON document.

    `manifest_version` is checked first, so a future version is reported as unsupported
    rather than as a pile of unknown fields.
    """
    if not isinstance(document, dict):
        fail("manifest_root_invalid")
    if "manifest_version" not in document:
        fail("manifest_missing_field", "manifest_version")
    if type(document["manifest_version"]) is not int:
        fail("manifest_invalid_field", "manifest_version")
    if document["manifest_version"] != 1:
        fail("manifest_version_unsupported", "manifest_version")
    _object(document, _REQUIRED_FIELDS, {"$schema"}, "top level")
    if "$schema" in document and not _is_text(document["$schema"], 2048):
        fail("manifest_invalid_field", "$schema")
    if not is_plugin_id(document["id"]):
        fail("manifest_invalid_field", "id")
    if not _is_text(document["title"], 128):
        fail("manifest_invalid_field", "title")
    if not _is_text(document["description"], 4096):
        fail("manifest_invalid_field", "description")
    if not is_semver(document["version"]):
        fail("manifest_invalid_field", "version")
    return PluginDefinition(
        manifest_version=1,
        plugin_id=document["id"],
        title=document["title"],
        description=document["description"],
        version=document["version"],
        requires=_requires(document["requires"]),
        capabilities=_capabilities(document["capabilities"]),
        configuration=_configuration(document["configuration"]),
        secret_references=_secret_references(document["secret_references"]),
        data_schema_version=_int(document["data_schema_version"], 1, 255, "data_schema_version"),
        authority=_authority(document["authority"]),
    )

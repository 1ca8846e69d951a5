"""The field rules of manifest v1, applied to an already decoded JSON document.

Nothing is coerced or defaulted: unknown, missing or mistyped fields fail with a stable
`ManifestError` code and fixed message; its location is the key path
(`capabilities[2].consent`) and its detail, for the author's terminal, says what the field
takes and what it holds.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Final, NoReturn

from mymcp.errors import ManifestError, found
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

__all__ = ["MAX_MANIFEST_BYTES", "definition_from_document", "is_semver"]

MAX_MANIFEST_BYTES: Final = 65536
_MAX_CAPABILITIES: Final = 64
_MAX_SECRET_REFERENCES: Final = 32
_MAX_CONFIG_PROPERTIES: Final = 32
_MAX_CONFIG_DEPTH: Final = 4


_SCHEMA_INVALID: Final = "manifest_configuration_schema_invalid"


def _expected(where: str, expectation: str, value: object) -> NoReturn:
    raise ManifestError.at(
        "manifest_invalid_field", where, f"expected {expectation}, got {found(value)}"
    )


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
        _expected(where, "a JSON object", value)
    prefix = "" if where == "top level" else f"{where}."
    takes = ", ".join(sorted(required | optional))
    unknown = sorted(set(value) - required - optional)
    if unknown:
        raise ManifestError.at(
            "manifest_unknown_field", prefix + unknown[0], f"unknown field; {where} takes {takes}"
        )
    missing = sorted(required - set(value))
    if missing:
        raise ManifestError.at(
            "manifest_missing_field", prefix + missing[0], f"required; {where} takes {takes}"
        )
    return value


def _int(value: object, low: int, high: int, where: str) -> int:
    if type(value) is not int or not low <= value <= high:
        _expected(where, f"an integer from {low} to {high}", value)
    return value


def _bool(value: object, where: str) -> bool:
    if type(value) is not bool:
        _expected(where, "true or false", value)
    return value


def _requires(value: object) -> HostApiRange:
    host_api = _object(value, {"host_api"}, set(), "requires")["host_api"]
    bounds = _object(host_api, {"min", "max"}, set(), "requires.host_api")
    minimum = _int(bounds["min"], 1, 255, "requires.host_api.min")
    maximum = _int(bounds["max"], 1, 255, "requires.host_api.max")
    if minimum > maximum:
        raise ManifestError.at(
            "manifest_invalid_field", "requires.host_api", f"min {minimum} is above max {maximum}"
        )
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


_SNAKE: Final = "lowercase snake case (a-z, 0-9, single underscores, a letter first), at most 64"


def _capability(value: object, where: str) -> CapabilityDeclaration:
    entry = _object(value, _CAPABILITY_FIELDS, set(), where)
    if not isinstance(entry["kind"], str):
        _expected(f"{where}.kind", '"tool"', entry["kind"])
    if entry["kind"] != "tool":
        raise ManifestError.at(
            "manifest_capability_kind_unsupported",
            f"{where}.kind",
            f'expected "tool", got {found(entry["kind"])}',
        )
    if not is_capability_local_id(entry["id"]):
        _expected(f"{where}.id", f"a tool id: {_SNAKE} characters", entry["id"])
    if not is_semver(entry["version"]):
        _expected(f"{where}.version", "a SemVer 2.0.0 version such as 1.0.0", entry["version"])
    effects = ToolEffects(
        read_only=_bool(entry["read_only"], f"{where}.read_only"),
        destructive=_bool(entry["destructive"], f"{where}.destructive"),
        idempotent=_bool(entry["idempotent"], f"{where}.idempotent"),
        open_world=_bool(entry["open_world"], f"{where}.open_world"),
    )
    if effects.read_only and effects.destructive:
        # A tool that changes nothing cannot destroy anything, and MCP gives
        # `destructiveHint` a meaning only when `readOnlyHint` is false. Accepting both
        # would also let one tool match a policy's `@read_only` and its `@destructive`,
        # so a rule meant for harmless tools would admit a destructive one.
        raise ManifestError.at(
            "manifest_invalid_field",
            f"{where}.destructive",
            "a read-only tool cannot be destructive: set destructive to false, or "
            "read_only to false if the tool changes anything",
        )
    if entry["consent"] not in ("none", "per_call"):
        _expected(f"{where}.consent", '"none" or "per_call"', entry["consent"])
    return CapabilityDeclaration(
        "tool", entry["id"], entry["version"], effects, Consent(entry["consent"])
    )


def _capabilities(value: object) -> tuple[CapabilityDeclaration, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= _MAX_CAPABILITIES:
        _expected("capabilities", f"an array of 1 to {_MAX_CAPABILITIES} capabilities", value)
    declarations: list[CapabilityDeclaration] = []
    seen: dict[tuple[str, str], int] = {}
    for index, item in enumerate(value):
        declaration = _capability(item, f"capabilities[{index}]")
        key = (declaration.kind, declaration.local_id)
        if key in seen:
            raise ManifestError.at(
                "manifest_duplicate_capability",
                f"capabilities[{index}].id",
                f"{declaration.local_id!r} is already declared by capabilities[{seen[key]}]",
            )
        seen[key] = index
        declarations.append(declaration)
    return tuple(declarations)


_SCALAR_TYPES: Final = frozenset({"string", "integer", "number", "boolean", "null"})
_SUBSET: Final = (
    "each node is {type: object, properties, additionalProperties: false[, required]}, "
    "{type: array, items} or {type: string|integer|number|boolean|null}"
)


def _schema_node(node: object, where: str, depth: int, budget: list[int]) -> None:
    """Check one node of the configuration-schema subset; `budget` counts properties left."""
    if not isinstance(node, dict):
        raise ManifestError.at(
            _SCHEMA_INVALID, where, f"expected a JSON object, got {found(node)}; {_SUBSET}"
        )
    if depth > _MAX_CONFIG_DEPTH:
        raise ManifestError.at(
            _SCHEMA_INVALID, where, f"nests deeper than {_MAX_CONFIG_DEPTH} levels"
        )
    kind = node.get("type")
    if kind == "object":
        keys = set(node)
        if not {"type", "properties", "additionalProperties"} <= keys <= _OBJECT_KEYS:
            raise ManifestError.at(_SCHEMA_INVALID, where, _SUBSET)
        properties = node["properties"]
        if not isinstance(properties, dict):
            raise ManifestError.at(
                _SCHEMA_INVALID,
                f"{where}.properties",
                f"expected a JSON object, got {found(properties)}",
            )
        if node["additionalProperties"] is not False:
            raise ManifestError.at(
                _SCHEMA_INVALID, f"{where}.additionalProperties", "must be false"
            )
        budget[0] -= len(properties)
        if budget[0] < 0:
            raise ManifestError.at(
                _SCHEMA_INVALID, where, f"more than {_MAX_CONFIG_PROPERTIES} properties in all"
            )
        for name in properties:
            if not _is_text(name, 64):
                raise ManifestError.at(
                    _SCHEMA_INVALID,
                    f"{where}.properties",
                    f"{name!r} is not a property name of 1-64 characters",
                )
        required = node.get("required", [])
        if (
            not isinstance(required, list)
            or not all(isinstance(name, str) and name in properties for name in required)
            or len(set(required)) != len(required)
        ):
            raise ManifestError.at(
                _SCHEMA_INVALID, f"{where}.required", "expected a list of distinct property names"
            )
        for name, child in properties.items():
            _schema_node(child, f"{where}.properties.{name}", depth + 1, budget)
    elif kind == "array":
        if set(node) != {"type", "items"}:
            raise ManifestError.at(_SCHEMA_INVALID, where, _SUBSET)
        _schema_node(node["items"], f"{where}.items", depth + 1, budget)
    elif not (isinstance(kind, str) and kind in _SCALAR_TYPES and set(node) == {"type"}):
        raise ManifestError.at(_SCHEMA_INVALID, where, _SUBSET)


_OBJECT_KEYS: Final = frozenset({"type", "properties", "additionalProperties", "required"})


def _configuration(value: object) -> ConfigurationDeclaration:
    table = _object(value, {"schema_version", "schema"}, set(), "configuration")
    _int(table["schema_version"], 1, 1, "configuration.schema_version")
    schema = table["schema"]
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ManifestError.at(
            _SCHEMA_INVALID, "configuration.schema", "the top level must be an object schema"
        )
    _schema_node(schema, "configuration.schema", 1, [_MAX_CONFIG_PROPERTIES])
    return ConfigurationDeclaration(schema_version=1, schema=schema)


def _secret_references(value: object) -> tuple[str, ...]:
    expectation = f"an array of at most {_MAX_SECRET_REFERENCES} names in {_SNAKE} characters"
    if not isinstance(value, list) or len(value) > _MAX_SECRET_REFERENCES:
        _expected("secret_references", expectation, value)
    for index, slot in enumerate(value):
        if not is_capability_local_id(slot):
            _expected(f"secret_references[{index}]", f"a name in {_SNAKE} characters", slot)
    if len(set(value)) != len(value):
        raise ManifestError.at(
            "manifest_duplicate_secret_reference", "secret_references", "a name repeats"
        )
    return tuple(value)


_FILESYSTEM_CLASSES: Final = frozenset(member.value for member in FilesystemClass)


def _authority(value: object) -> AuthorityDeclaration:
    takes = (
        "exactly {filesystem: [distinct classes from "
        + ", ".join(sorted(_FILESYSTEM_CLASSES))
        + "], network: true|false}"
    )
    if not isinstance(value, dict) or set(value) != {"filesystem", "network"}:
        raise ManifestError.at("manifest_authority_invalid", "authority", f"expected {takes}")
    classes = value["filesystem"]
    if (
        not isinstance(classes, list)
        or not all(isinstance(item, str) and item in _FILESYSTEM_CLASSES for item in classes)
        or len(set(classes)) != len(classes)
    ):
        raise ManifestError.at(
            "manifest_authority_invalid", "authority.filesystem", f"expected {takes}"
        )
    if type(value["network"]) is not bool:
        raise ManifestError.at(
            "manifest_authority_invalid", "authority.network", "expected true or false"
        )
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


def _text(document: dict[str, Any], key: str, maximum: int) -> str:
    value = document[key]
    if not _is_text(value, maximum):
        _expected(key, f"a string of 1 to {maximum} characters without control characters", value)
    return str(value)


def definition_from_document(document: object) -> PluginDefinition:
    """Apply every manifest-v1 field rule to a decoded JSON document.

    `manifest_version` is checked first, so a future version is reported as unsupported
    rather than as a pile of unknown fields.
    """
    if not isinstance(document, dict):
        raise ManifestError.at(
            "manifest_root_invalid", detail=f"expected a JSON object, got {found(document)}"
        )
    if "manifest_version" not in document:
        raise ManifestError.at(
            "manifest_missing_field", "manifest_version", "required; the manifest starts with it"
        )
    if type(document["manifest_version"]) is not int:
        _expected("manifest_version", "1", document["manifest_version"])
    if document["manifest_version"] != 1:
        raise ManifestError.at(
            "manifest_version_unsupported",
            "manifest_version",
            f"this MyMCP reads manifest version 1, got {document['manifest_version']}",
        )
    _object(document, _REQUIRED_FIELDS, {"$schema"}, "top level")
    if "$schema" in document:
        _text(document, "$schema", 2048)
    if not is_plugin_id(document["id"]):
        _expected(
            "id",
            "a plugin id: lowercase kebab case (a-z, 0-9, single hyphens, a letter first), "
            "at most 64 characters",
            document["id"],
        )
    title = _text(document, "title", 128)
    description = _text(document, "description", 4096)
    if not is_semver(document["version"]):
        _expected("version", "a SemVer 2.0.0 version such as 0.1.0", document["version"])
    return PluginDefinition(
        manifest_version=1,
        plugin_id=document["id"],
        title=title,
        description=description,
        version=document["version"],
        requires=_requires(document["requires"]),
        capabilities=_capabilities(document["capabilities"]),
        configuration=_configuration(document["configuration"]),
        secret_references=_secret_references(document["secret_references"]),
        data_schema_version=_int(document["data_schema_version"], 1, 255, "data_schema_version"),
        authority=_authority(document["authority"]),
    )

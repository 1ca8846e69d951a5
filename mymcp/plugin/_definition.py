"""The immutable plugin definition a manifest describes: metadata only, never code."""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from mymcp.errors import found
from mymcp.plugin._identity import CapabilityKind

__all__ = [
    "HOST_API_VERSION",
    "AuthorityDeclaration",
    "CapabilityDeclaration",
    "ConfigurationDeclaration",
    "Consent",
    "FilesystemClass",
    "HostApiRange",
    "PluginDefinition",
    "ToolEffects",
]

HOST_API_VERSION = 1
"""The plugin host API this MyMCP implements; manifests declare the range they accept."""


class Consent(enum.StrEnum):
    """Whether a client should ask its user before each call."""

    NONE = "none"
    PER_CALL = "per_call"


class FilesystemClass(enum.StrEnum):
    """Filesystem authority a plugin declares (informational; not a sandbox)."""

    DATA_READ = "data_read"
    DATA_WRITE = "data_write"
    STATE_READ = "state_read"
    STATE_WRITE = "state_write"
    CACHE_READ = "cache_read"
    CACHE_WRITE = "cache_write"


@dataclass(frozen=True, slots=True)
class ToolEffects:
    """What calling a tool does to the world; published as MCP annotations."""

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool


@dataclass(frozen=True, slots=True)
class HostApiRange:
    """Inclusive range of host API versions a plugin supports."""

    minimum: int
    maximum: int

    def admits(self, version: int) -> bool:
        return self.minimum <= version <= self.maximum


@dataclass(frozen=True, slots=True)
class CapabilityDeclaration:
    """One declared capability: its identity, contract version, effects and consent."""

    kind: CapabilityKind
    local_id: str
    version: str
    effects: ToolEffects
    consent: Consent


def _freeze(value: Any) -> Any:
    """Deep-freeze JSON so a definition can be compared and shared safely."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(item) for item in value)
    return value


@dataclass(frozen=True, slots=True)
class ConfigurationDeclaration:
    """The plugin's configuration schema (a bounded JSON Schema subset)."""

    schema_version: int
    schema: Mapping[str, Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "schema", _freeze(self.schema))

    def violation(
        self, values: Mapping[str, Any], secrets: Iterable[str] = ()
    ) -> tuple[str, str] | None:
        """The first place `values` breaks the schema, as (key path, what is wrong), or
        None when they fit. Key paths read `limits.max_items` and `names[2]`.

        A wrong value is shown, except under a key named in `secrets` (the manifest's
        `secret_references`) or named like a secret (`api_key`, `token`, ...): the
        diagnostic goes to terminals and CI logs, and a key or token would stay there."""
        problem = _violation(self.schema, values, "")
        if problem is None:
            return None
        where, detail = problem
        hidden = frozenset(secrets)
        if _names_a_secret(where, hidden):
            detail = _SHOWN_VALUE.sub(r"got \g<kind> (not shown: the key names a secret)", detail)
        elif _holds_a_secret(_value_at(values, where), hidden):
            detail = _SHOWN_VALUE.sub(r"got \g<kind> (not shown: it holds a secret)", detail)
        return where, detail

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigurationDeclaration):
            return NotImplemented
        return self.schema_version == other.schema_version and _thaw(self.schema) == _thaw(
            other.schema
        )

    def __hash__(self) -> int:
        return hash(self.schema_version)


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


_KIND_WORDS: Final[Mapping[str, str]] = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


_SECRET_WORDS: Final = ("secret", "token", "password", "passwd", "credential", "key")
# `got 'sk-…' (a string)` in a detail: the value, then its kind.
_SHOWN_VALUE: Final = re.compile(r"got .* \((?P<kind>an? [a-z ]+)\)$", re.DOTALL)


def _path_parts(where: str) -> list[str]:
    """The keys and indexes of a key path `_violation` gives (`auth.tokens[2]`)."""
    return re.findall(r"[^.\[\]]+", where)


def _names_a_secret(where: str, secrets: frozenset[str]) -> bool:
    """Whether a key on a path (`auth.api_key`, `tokens[2]`) names a secret."""
    keys = [key for key in _path_parts(where) if not key.isdigit()]
    return any(key in secrets or any(word in key.lower() for word in _SECRET_WORDS) for key in keys)


def _value_at(values: Mapping[str, Any], where: str) -> object:
    """The value at a key path `_violation` gave (`auth.tokens[2]`), or None."""
    node: object = values
    for key in _path_parts(where):
        if isinstance(node, Mapping):
            node = node.get(key)
        elif isinstance(node, list | tuple) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


def _holds_a_secret(value: object, secrets: frozenset[str]) -> bool:
    """Whether a table or array holds, at any depth, a key that names a secret."""
    pending = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, Mapping):
            if any(_names_a_secret(str(key), secrets) for key in node):
                return True
            pending.extend(node.values())
        elif isinstance(node, list | tuple):
            pending.extend(node)
    return False


def _violation(schema: Mapping[str, Any], value: Any, where: str) -> tuple[str, str] | None:
    kind = schema["type"]
    here = where or "(top level)"
    if kind == "object":
        if not isinstance(value, Mapping):
            return here, f"expected a table, got {found(value)}"
        properties: Mapping[str, Any] = schema["properties"]
        for name in value:
            if name not in properties:
                takes = ", ".join(properties) or "no keys"
                return f"{where}.{name}".lstrip("."), f"unknown key; the plugin takes {takes}"
        for name in schema.get("required", ()):
            if name not in value:
                return f"{where}.{name}".lstrip("."), "required by the plugin, but missing"
        for name, item in value.items():
            problem = _violation(properties[name], item, f"{where}.{name}".lstrip("."))
            if problem is not None:
                return problem
        return None
    if kind == "array":
        if not isinstance(value, list | tuple):
            return here, f"expected an array, got {found(value)}"
        for index, item in enumerate(value):
            problem = _violation(schema["items"], item, f"{where}[{index}]")
            if problem is not None:
                return problem
        return None
    # bool is an int in Python, never in JSON Schema.
    if isinstance(value, bool) != (kind == "boolean") or not isinstance(value, _JSON_TYPES[kind]):
        return here, f"expected {_KIND_WORDS[kind]}, got {found(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        # TOML writes `nan` and `inf`; JSON, which the plugin's schema speaks, has neither.
        return here, f"expected a finite number, got {value}"
    return None


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class AuthorityDeclaration:
    """The filesystem classes and network access a plugin says it needs."""

    filesystem: tuple[FilesystemClass, ...]
    network: bool


@dataclass(frozen=True, slots=True)
class PluginDefinition:
    """Everything a manifest says about a plugin; holds no handlers or code locations."""

    manifest_version: int
    plugin_id: str
    title: str
    description: str
    version: str
    requires: HostApiRange
    capabilities: tuple[CapabilityDeclaration, ...]
    configuration: ConfigurationDeclaration
    secret_references: tuple[str, ...]
    data_schema_version: int
    authority: AuthorityDeclaration

    def capability(self, kind: CapabilityKind, local_id: str) -> CapabilityDeclaration | None:
        """The declaration for (kind, local id), if declared."""
        for declaration in self.capabilities:
            if declaration.kind == kind and declaration.local_id == local_id:
                return declaration
        return None

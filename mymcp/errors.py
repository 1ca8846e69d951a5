"""The one exception tree of MyMCP, and the diagnostic every loader and validator reports.

A failure has two audiences. Logs and anything that crosses the network get only the
stable `code` and the fixed `message`, which never hold a path, a value or parser text.
The operator's own terminal (`mymcp check`, `mymcp plugin check`, a failed start) gets
the whole `Diagnostic`: where the fault is (a file with line and column, a key path, an
environment variable, a plugin and its module) and a `detail` that says what was expected
and what was found.

The messages of every error type's codes are in one table, `MESSAGES`, so a code means
the same thing wherever it is raised.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import date, time
from types import MappingProxyType
from typing import Final, Literal, Self

from mymcp._escaping import escape_invisible, json_for_terminal

__all__ = [
    "MESSAGES",
    "ApprovalError",
    "AuditError",
    "ConfigurationError",
    "CredentialProvisioningError",
    "Diagnostic",
    "DiscoveryError",
    "ExternalPluginLoadError",
    "HostAuthenticationCompositionError",
    "HostRuntimeCompositionError",
    "ListenError",
    "Location",
    "ManifestError",
    "MnemosyneSettingsError",
    "NOWHERE",
    "MyMCPError",
    "StopRequested",
    "VerifierSourceError",
    "found",
    "key_path",
    "kind",
    "shown",
]


def shown(value: object) -> str:
    """A short, escaped rendering of a value for the operator's terminal, spelled as the
    TOML or JSON it was read from spells it (`"8000"`, `true`, `[1, 2]`; a frozen copy of
    an array or a table as the array or table it was read as). A float JSON cannot hold
    is spelled as TOML spells it (`inf`, `nan`), a TOML date or time as TOML writes it,
    and anything else neither format has as Python writes it, escaped all the same."""
    unfrozen = _unfrozen(value)
    if isinstance(unfrozen, float) and not math.isfinite(unfrozen):
        text = str(unfrozen)  # inf, -inf, nan: TOML's own words
    elif isinstance(unfrozen, date | time):
        text = unfrozen.isoformat()
    else:
        try:
            text = json_for_terminal(unfrozen)
        except (TypeError, ValueError, RecursionError):
            text = escape_invisible(repr(unfrozen))
    return text if len(text) <= 80 else text[:77] + "..."


_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")


def key_path(parts: Iterable[str | int]) -> str:
    """`plugins[0].module`: keys and array positions as diagnostics write them; a key
    that is not a bare TOML key is quoted as TOML and JSON quote it (`"a b"`, `"a.b"`),
    so that the path still names that one key."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
            continue
        name = part if _BARE_KEY.fullmatch(part) else json_for_terminal(part)
        text += f".{name}" if text else name
    return text


def _unfrozen(value: object) -> object:
    if isinstance(value, tuple | list):
        return [_unfrozen(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _unfrozen(item) for key, item in value.items()}
    return value


def kind(value: object) -> str:
    """What a decoded TOML or JSON value is, in the words of those formats (a frozen
    copy of one, too: a read-only mapping is a table, a tuple an array)."""
    named = _KIND_NAMES.get(type(value))
    if named is not None:
        return named
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, tuple):
        return "an array"
    return type(value).__name__


def found(value: object) -> str:
    """`"8000" (a string)`: the value and its kind, for a detail that says what was found."""
    return f"{shown(value)} ({kind(value)})"


_KIND_NAMES: Final[Mapping[type, str]] = {
    str: "a string",
    int: "an integer",
    float: "a float",
    bool: "a boolean",
    list: "an array",
    dict: "a table",
    type(None): "null",
}


_MAX_SHOWN_KEY: Final = 200


@dataclass(frozen=True, slots=True)
class Location:
    """Where a fault is. `source` is a file path, an environment variable (`$NAME`) or a
    plugin (`plugin NAME (module M)`); `key` is the key path inside it
    (`server.port`, `capabilities[2].consent`); `line` and `column` count from 1."""

    source: str | None = None
    key: str | None = None
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        head = self.source or ""
        if self.line is not None:
            position = f"{self.line}" + (f":{self.column}" if self.column is not None else "")
            head = f"{head}:{position}" if head else f"line {position}"
        key = self.key
        if key is not None and len(key) > _MAX_SHOWN_KEY:
            # A key is the file's own text: one of any length must not make a diagnostic
            # line of that length (values are cut short the same way).
            key = key[:_MAX_SHOWN_KEY] + "..."
        return ": ".join(part for part in (head, key) if part)

    def filled(self, other: Location) -> Location:
        """This location with every part it lacks taken from `other`."""
        return Location(
            self.source if self.source is not None else other.source,
            self.key if self.key is not None else other.key,
            self.line if self.line is not None else other.line,
            self.column if self.column is not None else other.column,
        )


NOWHERE: Final = Location()


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding: a stable `code`, a fixed content-free `message`, where it is and,
    for the operator's terminal only, a `detail` naming the expected and the found."""

    code: str
    message: str
    location: Location = NOWHERE
    detail: str | None = None
    severity: Literal["error", "warning"] = "error"

    def render(self) -> str:
        """`<location>: <message>: <detail> (code=<code>)`, for the operator's terminal."""
        where = str(self.location)
        text = f"{where}: {self.message}" if where else self.message
        if self.detail:
            text = f"{text}: {self.detail}"
        return f"{text} (code={self.code})"


class MyMCPError(Exception):
    """Base of every MyMCP error: a `Diagnostic` with a stable code and fixed message.

    `message` defaults to the one `MESSAGES` gives the error type for `code`. `str()` of
    the error is the terminal rendering (location and detail included); log lines use
    `code`.
    """

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        location: Location = NOWHERE,
        detail: str | None = None,
    ) -> None:
        if message is None:
            message = self.messages()[code]
        self.diagnostic = Diagnostic(code, message, location, detail)
        super().__init__(self.diagnostic.render())

    @classmethod
    def at(cls, code: str, key: str | None = None, detail: str | None = None) -> Self:
        """The error for `code` at key path `key` (`server.port`, `capabilities[2].consent`)
        of a file the caller names later (`locate`); `detail` says, for the operator's
        terminal, what the key takes and what it holds."""
        return cls(code, location=Location(key=key), detail=detail)

    @classmethod
    def messages(cls) -> Mapping[str, str]:
        """The fixed message of every code this error type raises without its own."""
        for error_type in cls.__mro__:
            table = MESSAGES.get(error_type)
            if table is not None:
                return table
        return _NONE

    @property
    def code(self) -> str:
        return self.diagnostic.code

    @property
    def message(self) -> str:
        return self.diagnostic.message

    @property
    def location(self) -> Location:
        return self.diagnostic.location

    @property
    def detail(self) -> str | None:
        return self.diagnostic.detail

    def __str__(self) -> str:
        return self.diagnostic.render()

    def locate(self, location: Location) -> None:
        """Fill in what this error's location lacks (a caller knows the file it read)."""
        self.diagnostic = replace(self.diagnostic, location=self.location.filled(location))
        self.args = (self.diagnostic.render(),)


class ConfigurationError(MyMCPError):
    """The host configuration file is unsafe, unreadable or invalid."""


class ManifestError(MyMCPError):
    """A plugin manifest, or a plugin's parity with its manifest, is invalid."""


class ExternalPluginLoadError(MyMCPError):
    """An operator-declared plugin could not be preflighted, imported or composed."""


class HostRuntimeCompositionError(MyMCPError):
    """Tool surfaces collided or could not be bound into one runtime."""


class HostAuthenticationCompositionError(MyMCPError):
    """The authentication configuration cannot be composed into an authenticator."""


class DiscoveryError(MyMCPError):
    """OAuth issuer metadata or its key set could not be fetched or is invalid."""


class MnemosyneSettingsError(MyMCPError):
    """The Mnemosyne settings (environment or ~/.mnemosyne/config.toml) are invalid."""


class AuditError(MyMCPError):
    """The security audit log cannot be opened or written."""


class VerifierSourceError(MyMCPError):
    """The operator-bearer verifier file is unsafe or invalid. `code` is a safe-file code
    (`unsafe_path`, `not_regular`, `unsafe_permissions`, `unreadable`, `too_large`,
    `source_changed`), `invalid_utf8` or `invalid_format`; startup reports each as
    `verifier_source`."""


class CredentialProvisioningError(MyMCPError):
    """A credential could not be created or revoked. For `verifier_source` (the existing
    verifier file is unsafe or invalid) `reason` holds the verifier file's own code."""

    def __init__(
        self,
        code: str,
        *,
        reason: str | None = None,
        location: Location = NOWHERE,
        detail: str | None = None,
    ) -> None:
        super().__init__(code, location=location, detail=detail)
        self.reason = reason

    @classmethod
    def of_source(cls, failure: VerifierSourceError) -> CredentialProvisioningError:
        """The existing verifier file is unusable: keep its code as the reason."""
        detail = f"{failure.code}: {failure.detail}" if failure.detail else failure.code
        return cls("verifier_source", reason=failure.code, location=failure.location, detail=detail)


class ApprovalError(MyMCPError):
    """A console decision that cannot be made; `code` says why."""


class ListenError(MyMCPError):
    """The server cannot take requests where it was asked to (its configured address and
    port, or stdin and stdout); `code` says why."""


class StopRequested(SystemExit):
    """The process was asked to stop (SIGTERM, from a service manager): raised by its
    own signal handler, so it is no error, and never a plugin's failure even when it
    interrupts a plugin's import."""


_NONE: Final[Mapping[str, str]] = MappingProxyType({})

# Every code -> message table, one per error type: a code means the same thing wherever
# it is raised. Types that are not listed (safe files, strict JSON, the console state,
# the audit) give each error its message where they raise it.
_TABLES: Final[dict[type[MyMCPError], dict[str, str]]] = {
    ConfigurationError: {
        "invalid_location": "MyMCP configuration location is unavailable",
        "invalid_environment": "MyMCP configuration from the environment is invalid",
        "unsafe_path": "MyMCP configuration path is unsafe",
        "not_regular": "MyMCP configuration source is not a regular file",
        "unsafe_permissions": "MyMCP configuration source permissions are unsafe",
        "unreadable": "MyMCP configuration source could not be read",
        "too_large": "MyMCP configuration exceeds 65536 bytes",
        "source_changed": "MyMCP configuration changed while being read",
        "invalid_utf8": "MyMCP configuration is not valid UTF-8",
        "invalid_toml": "MyMCP configuration is not valid TOML",
        "unsupported_schema_version": "MyMCP configuration schema_version is not supported",
        "invalid_schema": "MyMCP configuration does not match its schema",
        "duplicate_plugin": "MyMCP configuration declares a plugin id more than once",
        "duplicate_authentication_adapter_id": (
            "MyMCP configuration declares an authentication adapter id more than once"
        ),
        "duplicate_authentication_adapter_route": (
            "MyMCP configuration declares an authentication adapter route more than once"
        ),
        "authentication_adapter_limit_exceeded": (
            "MyMCP authentication adapter limit of 32 is exceeded"
        ),
        "bundled_plugin_conflict": "MyMCP configuration declares the bundled plugin id",
        "enabled_plugin_unsupported": "MyMCP configuration schema 1 cannot enable plugins",
        "policy_invalid": "MyMCP configuration policy is invalid",
        "policy_unknown_key": "MyMCP configuration policy has an unknown key",
        "policy_empty_list": "MyMCP configuration policy has an empty list",
        "policy_invalid_principal": (
            "MyMCP configuration policy has an invalid principal selector"
        ),
        "policy_invalid_tool": "MyMCP configuration policy has an invalid tool selector",
        "policy_unknown_tool": "MyMCP configuration policy names a tool that does not exist",
        "policy_duplicate_rule": "MyMCP configuration policy repeats a rule",
        "policy_duplicate_selector": ("MyMCP configuration policy repeats a selector in one list"),
        "policy_too_large": "MyMCP configuration policy is too large",
    },
    ManifestError: {
        "manifest_resource_invalid": "MyMCP plugin manifest resource is invalid",
        "manifest_resource_too_large": "MyMCP plugin manifest exceeds 65536 bytes",
        "manifest_resource_unsafe_path": "MyMCP plugin manifest path is unsafe",
        "manifest_resource_not_regular": "MyMCP plugin manifest is not a regular file",
        "manifest_resource_unsafe_permissions": "MyMCP plugin manifest permissions are unsafe",
        "manifest_resource_unreadable": "MyMCP plugin manifest could not be read",
        "manifest_resource_source_changed": "MyMCP plugin manifest changed while being read",
        "manifest_resource_invalid_utf8": "MyMCP plugin manifest is not valid UTF-8",
        "manifest_resource_invalid_json": "MyMCP plugin manifest is not valid JSON",
        "manifest_resource_duplicate_key": "MyMCP plugin manifest repeats a JSON object key",
        "manifest_root_invalid": "MyMCP plugin manifest root is not a JSON object",
        "manifest_unknown_field": "MyMCP plugin manifest has an unknown field",
        "manifest_missing_field": "MyMCP plugin manifest lacks a required field",
        "manifest_invalid_field": "MyMCP plugin manifest has an invalid field",
        "manifest_version_unsupported": "MyMCP plugin manifest version is not supported",
        "manifest_capability_kind_unsupported": (
            "MyMCP plugin manifest capability kind is unsupported"
        ),
        "manifest_duplicate_capability": "MyMCP plugin manifest declares a capability twice",
        "manifest_duplicate_secret_reference": ("MyMCP plugin manifest repeats a secret reference"),
        "manifest_configuration_schema_invalid": ("MyMCP plugin configuration schema is invalid"),
        "manifest_authority_invalid": "MyMCP plugin manifest authority is invalid",
        "host_api_incompatible": "MyMCP plugin does not support this host API version",
        "definition_manifest_mismatch": "MyMCP plugin definition does not equal its manifest",
        "contribution_plugin_mismatch": "MyMCP plugin contribution names another plugin",
        "contribution_version_mismatch": "MyMCP plugin contribution version does not match",
        "undeclared_capability": "MyMCP plugin contribution selects an undeclared capability",
        "duplicate_selected_capability": "MyMCP plugin contribution selects a capability twice",
        "capability_order_mismatch": "MyMCP plugin contribution breaks the declaration order",
        "capability_metadata_mismatch": (
            "MyMCP plugin tool effects or consent differ from the manifest"
        ),
    },
    ExternalPluginLoadError: {
        "external_plugin_limit_exceeded": "MyMCP external plugin limit is exceeded",
        "external_manifest_unsafe_path": "MyMCP external plugin manifest path is unsafe",
        "external_manifest_not_regular": ("MyMCP external plugin manifest is not a regular file"),
        "external_manifest_unsafe_permissions": (
            "MyMCP external plugin manifest permissions are unsafe"
        ),
        "external_manifest_unreadable": "MyMCP external plugin manifest could not be read",
        "external_manifest_too_large": "MyMCP external plugin manifest exceeds 65536 bytes",
        "external_manifest_source_changed": (
            "MyMCP external plugin manifest changed while being read"
        ),
        "external_manifest_invalid": "MyMCP external plugin manifest is invalid",
        "external_manifest_identity_mismatch": (
            "MyMCP external plugin manifest id does not match its declaration"
        ),
        "external_manifest_host_api_incompatible": (
            "MyMCP external plugin does not support this host API version"
        ),
        "external_plugin_configuration_invalid": (
            "MyMCP external plugin configuration does not match the plugin's schema"
        ),
        "external_plugin_import_failed": "MyMCP external plugin module could not be imported",
        "external_plugin_entrypoint_invalid": (
            "MyMCP external plugin entrypoint is missing, not callable or failed"
        ),
        "external_plugin_contract_invalid": (
            "MyMCP external plugin entrypoint did not return a PluginAdapter"
        ),
        "external_plugin_composition_invalid": (
            "MyMCP external plugins could not be composed with the host"
        ),
        "external_plugin_schema_invalid": (
            "MyMCP external plugin publishes a tool schema that is not valid JSON Schema 2020-12"
        ),
        "external_plugin_name_collision": (
            "MyMCP external plugin bound under local names would publish a tool name "
            "that another tool has or that is reserved for the host or the bundled memory tools"
        ),
    },
    HostRuntimeCompositionError: dict.fromkeys(
        (
            "duplicate_plugin",
            "capability_plugin_mismatch",
            "duplicate_capability",
            "duplicate_binding",
            "unknown_binding",
            "reserved_public_name",
            "invalid_public_name",
            "duplicate_public_name",
            "unbound_capability",
            "invalid_tool_definition",
            "invalid_input_schema",
            "invalid_output_schema",
        ),
        "MyMCP could not compose the tool surface",
    ),
    HostAuthenticationCompositionError: {
        "adapter_type_unavailable": "MyMCP authentication adapter type is unavailable",
        "verifier_source": "MyMCP operator bearer verifier source is unusable",
        "route_invalid": "MyMCP authentication adapter route is invalid",
        "oauth_route_invalid": ("MyMCP OAuth adapter route must be the bearer authorization route"),
        "oauth_validation_source": (
            "MyMCP OAuth issuer metadata or keys are unavailable or invalid"
        ),
        "oauth_resource": "MyMCP OAuth protected resource cannot be derived from the binding",
        "oauth_configuration": "MyMCP OAuth issuer configuration is invalid",
        "anonymous_access_enabled": "MyMCP OAuth requires anonymous access to be disabled",
        "route_collision": "MyMCP authentication adapter routes collide",
    },
    DiscoveryError: {
        "metadata_unavailable": "MyMCP could not fetch the OAuth issuer metadata",
        "metadata_invalid": "MyMCP OAuth issuer metadata is invalid",
        "jwks_unavailable": "MyMCP could not fetch the OAuth issuer's key set",
        "jwks_invalid": "MyMCP OAuth issuer key set is invalid",
    },
    MnemosyneSettingsError: {
        "invalid_environment": "Mnemosyne setting in the environment is invalid",
        "invalid_toml": "Mnemosyne settings file is not valid UTF-8 TOML",
        "invalid_schema": "Mnemosyne settings file does not match its schema",
        "unreadable": "Mnemosyne settings file could not be read",
        "not_regular": "Mnemosyne settings source is not a regular file",
        "unsafe_path": "Mnemosyne settings path is unsafe",
        "too_large": "Mnemosyne settings file exceeds 16384 bytes",
        "unsafe_permissions": "Mnemosyne settings source permissions are unsafe",
        "source_changed": "Mnemosyne settings file changed while being read",
    },
    VerifierSourceError: dict.fromkeys(
        (
            "unsafe_path",
            "not_regular",
            "unsafe_permissions",
            "unreadable",
            "too_large",
            "source_changed",
            "invalid_utf8",
            "invalid_format",
        ),
        "MyMCP operator bearer verifier source is unusable",
    ),
    CredentialProvisioningError: {
        "invalid_subject": "MyMCP credential subject is invalid",
        "unsafe_directory": "MyMCP verifier directory is missing or unsafe",
        "verifier_source": "MyMCP operator bearer verifier source is unusable",
        "credential_limit_exceeded": "MyMCP credential limit of 32 is exceeded",
        "verifier_too_large": "MyMCP verifier file size limit of 16384 bytes is exceeded",
        "write_failed": "MyMCP could not write the verifier file",
    },
    ApprovalError: {
        "not_found": "MyMCP approval does not exist",
        "expired": "MyMCP approval expired before the decision",
        "decided": "MyMCP approval was already decided",
    },
    ListenError: {
        "address_in_use": "MyMCP cannot listen: the address and port are already in use",
        "address_unavailable": "MyMCP cannot listen: the address is not on this machine",
        "address_not_permitted": "MyMCP cannot listen: the system does not permit this port",
        "listen_failed": "MyMCP cannot listen on the configured address and port",
        "stdio_unavailable": "MyMCP stdio needs an open standard input and output",
    },
}
MESSAGES: Final[Mapping[type[MyMCPError], Mapping[str, str]]] = MappingProxyType(
    {error_type: MappingProxyType(table) for error_type, table in _TABLES.items()}
)

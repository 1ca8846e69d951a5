"""Immutable values that describe a loaded host configuration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from mymcp.config._governance import ApprovalSettings, AuditSettings, PolicySettings

__all__ = [
    "DEFAULT_ABSOLUTE_LIFETIME_SECONDS",
    "DEFAULT_INACTIVITY_TIMEOUT_SECONDS",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_SESSIONS_PER_PRINCIPAL",
    "AdapterDeclaration",
    "AdapterRoute",
    "AuthenticationSettings",
    "HostConfiguration",
    "McpSettings",
    "PluginBinding",
    "PluginDeclaration",
    "ServerSettings",
]

DEFAULT_INACTIVITY_TIMEOUT_SECONDS = 1800
DEFAULT_ABSOLUTE_LIFETIME_SECONDS = 28800
DEFAULT_SESSIONS_PER_PRINCIPAL = 64
DEFAULT_MAX_SESSIONS = 1024


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Where the launchers bind (always a loopback IP literal) and how they log.

    The launchers' `--log-level` / `--log-format` options and `MYMCP_LOG_LEVEL` win over
    the two logging keys, which only schema 8 may set.
    """

    address: str = "127.0.0.1"
    port: int = 8000
    log_level: str = "info"
    log_format: str = "text"


PluginBinding = Literal["namespaced", "local"]


@dataclass(frozen=True, slots=True)
class PluginDeclaration:
    """One `[[plugins]]` entry; schema 1 declarations carry no manifest path or module.

    `configuration` holds the operator's values for the plugin (schema 8), read-only; they
    are checked against the schema the plugin's manifest declares when it loads.
    """

    id: str
    enabled: bool
    manifest_path: Path | None = None
    module: str | None = None
    configuration: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    binding: PluginBinding = "namespaced"
    """How its tools are named: `<plugin-id>__<tool-id>`, or (schema 8, `"local"`) under
    their own ids, for a trusted plugin whose clients call fixed names."""


@dataclass(frozen=True, slots=True)
class AdapterRoute:
    """The exact evidence route an authentication adapter answers for."""

    source: str
    scheme: str
    profile: str | None = None


@dataclass(frozen=True, slots=True)
class AdapterDeclaration:
    """One `[[authentication.adapters]]` entry."""

    id: str
    type: str
    enabled: bool
    route: AdapterRoute


@dataclass(frozen=True, slots=True)
class AuthenticationSettings:
    """The `[authentication]` table; schemas 1-2 and absent files mean anonymous only."""

    anonymous_enabled: bool = True
    adapters: tuple[AdapterDeclaration, ...] = ()
    operator_bearer_verifier_path: Path | None = None
    oauth_issuer: str | None = None


@dataclass(frozen=True, slots=True)
class McpSettings:
    """Transport settings from schema 6-8 `[mcp]`; a lifetime of 0 disables that limit."""

    strict_protocol_version: bool = True
    session_inactivity_timeout_seconds: int = DEFAULT_INACTIVITY_TIMEOUT_SECONDS
    session_absolute_lifetime_seconds: int = DEFAULT_ABSOLUTE_LIFETIME_SECONDS
    max_sessions_per_principal: int = DEFAULT_SESSIONS_PER_PRINCIPAL
    max_sessions: int = DEFAULT_MAX_SESSIONS


@dataclass(frozen=True, slots=True)
class HostConfiguration:
    """The whole host configuration, frozen once read."""

    schema_version: int = 1
    server: ServerSettings = field(default_factory=ServerSettings)
    plugins: tuple[PluginDeclaration, ...] = ()
    authentication: AuthenticationSettings = field(default_factory=AuthenticationSettings)
    mcp: McpSettings = field(default_factory=McpSettings)
    policy: PolicySettings | None = None
    """None (no `[policy]`) allows every principal every tool."""
    audit: AuditSettings = field(default_factory=lambda: AuditSettings(enabled=False))
    """Schemas 1-7 have no `[audit]` and audit nothing; schema 8 audits by default."""
    approval: ApprovalSettings = field(default_factory=ApprovalSettings)
    origin: Literal["loaded", "absent_defaults"] = "absent_defaults"
    source: Path | None = None
    """The file it was read from (None for defaults or bytes), for the operator's terminal."""

"""The host configuration schema matrix (versions 1-8): a parsed TOML document in, a frozen
`HostConfiguration` out. Every failure is a `ConfigurationError` with a stable code and a
fixed message that names at most a schema location, never a value or a path.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Final

from mymcp.config._governance import (
    ApprovalSettings,
    AuditSettings,
    approval_settings,
    audit_settings,
    policy_settings,
)
from mymcp.config._grammar import (
    BUNDLED_PLUGIN_ID,
    MAX_AUTHENTICATION_ADAPTERS,
    MAX_SESSION_LIFETIME_SECONDS,
    OAUTH_JWT_ADAPTER_TYPE,
    OPERATOR_BEARER_ADAPTER_TYPE,
    SUPPORTED_SCHEMA_VERSIONS,
    fail,
    is_adapter_route_token,
    is_issuer,
    is_module_name,
    is_safe_absolute_path,
)
from mymcp.config._model import (
    AdapterDeclaration,
    AdapterRoute,
    AuthenticationSettings,
    HostConfiguration,
    McpSettings,
    PluginDeclaration,
    ServerSettings,
)
from mymcp.plugin._identity import is_plugin_id

__all__ = ["host_configuration_from_document"]


def _table(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        fail(where)
    return value


def _exact(table: dict[str, Any], required: set[str], optional: set[str], where: str) -> None:
    """Unknown keys are reported by their table, missing ones by their (schema) name."""
    keys = set(table)
    if not keys <= required | optional:
        fail(where)
    missing = required - keys
    if missing:
        name = min(missing)
        fail(name if where == "top level" else f"{where}.{name}")


def _bool(value: object, where: str) -> bool:
    if type(value) is not bool:
        fail(where)
    return value


def _int(value: object, low: int, high: int, where: str) -> int:
    if type(value) is not int or not low <= value <= high:
        fail(where)
    return value


def _schema_version(document: dict[str, Any]) -> int:
    value = document.get("schema_version")
    if type(value) is not int:
        fail("schema_version")
    if value not in SUPPORTED_SCHEMA_VERSIONS:
        fail("schema_version", "unsupported_schema_version")
    return value


def _server(value: object) -> ServerSettings:
    if value is None:
        return ServerSettings()
    table = _table(value, "server")
    _exact(table, set(), {"address", "port"}, "server")
    address = ServerSettings().address
    if "address" in table:
        text = table["address"]
        if not isinstance(text, str) or "%" in text:
            fail("server.address")
        try:
            parsed = ipaddress.ip_address(text)
        except ValueError:
            fail("server.address")
        loopback_v4 = parsed.version == 4 and parsed in ipaddress.ip_network("127.0.0.0/8")
        if not (loopback_v4 or parsed == ipaddress.IPv6Address("::1")):
            fail("server.address")
        address = str(parsed)
    port = _int(table.get("port", ServerSettings().port), 1, 65535, "server.port")
    return ServerSettings(address=address, port=port)


def _plugins(value: object, version: int) -> tuple[PluginDeclaration, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        fail("plugins")
    fields = {"id", "enabled"} if version == 1 else {"id", "enabled", "manifest_path", "module"}
    optional = {"binding"} if version >= 8 else set()
    declarations: list[PluginDeclaration] = []
    seen: set[str] = set()
    for entry in value:
        table = _table(entry, "plugins")
        _exact(table, fields, optional, "plugins")
        plugin_id = table["id"]
        if not is_plugin_id(plugin_id):
            fail("plugins.id")
        if plugin_id == BUNDLED_PLUGIN_ID:
            fail("plugins.id", "bundled_plugin_conflict")
        if plugin_id in seen:
            fail("plugins.id", "duplicate_plugin")
        seen.add(plugin_id)
        enabled = _bool(table["enabled"], "plugins.enabled")
        if version == 1:
            declarations.append(PluginDeclaration(id=plugin_id, enabled=enabled))
            continue
        if not is_safe_absolute_path(table["manifest_path"]):
            fail("plugins.manifest_path")
        if not is_module_name(table["module"]):
            fail("plugins.module")
        binding = table.get("binding", "namespaced")
        if binding not in ("namespaced", "local"):
            fail("plugins.binding")
        declarations.append(
            PluginDeclaration(
                id=plugin_id,
                enabled=enabled,
                manifest_path=Path(table["manifest_path"]),
                module=table["module"],
                binding=binding,
            )
        )
    return tuple(declarations)


def _route(value: object) -> AdapterRoute:
    table = _table(value, "authentication.adapters.route")
    _exact(table, {"source", "scheme"}, {"profile"}, "authentication.adapters.route")
    if table["source"] != "authorization":
        fail("authentication.adapters.route.source")
    if not is_adapter_route_token(table["scheme"]):
        fail("authentication.adapters.route.scheme")
    profile = table.get("profile")
    if profile is not None and not is_adapter_route_token(profile):
        fail("authentication.adapters.route.profile")
    return AdapterRoute(source="authorization", scheme=table["scheme"], profile=profile)


def _adapters(value: object) -> tuple[AdapterDeclaration, ...]:
    if not isinstance(value, list):
        fail("authentication.adapters")
    if len(value) > MAX_AUTHENTICATION_ADAPTERS:
        fail("authentication.adapters", "authentication_adapter_limit_exceeded")
    adapters: list[AdapterDeclaration] = []
    ids: set[str] = set()
    routes: set[AdapterRoute] = set()
    for entry in value:
        table = _table(entry, "authentication.adapters")
        _exact(table, {"id", "type", "enabled", "route"}, set(), "authentication.adapters")
        if not is_plugin_id(table["id"]):
            fail("authentication.adapters.id")
        if not is_plugin_id(table["type"]):
            fail("authentication.adapters.type")
        enabled = _bool(table["enabled"], "authentication.adapters.enabled")
        route = _route(table["route"])
        if table["id"] in ids:
            fail("authentication.adapters.id", "duplicate_authentication_adapter_id")
        if route in routes:
            fail("authentication.adapters.route", "duplicate_authentication_adapter_route")
        ids.add(table["id"])
        routes.add(route)
        adapters.append(AdapterDeclaration(table["id"], table["type"], enabled, route))
    return tuple(adapters)


def _source_table(table: dict[str, Any], key: str, declared: bool, field: str) -> Any:
    """The single `field` of `[authentication.<key>]`, present if and only if `declared`."""
    where = f"authentication.{key}"
    if declared != (key in table):
        fail(where)
    if not declared:
        return None
    inner = _table(table[key], where)
    _exact(inner, {field}, set(), where)
    return inner[field]


def _authentication(value: object, version: int) -> AuthenticationSettings:
    table = _table(value, "authentication")
    optional = {"adapters"}
    if version >= 4:
        optional.add("operator_bearer")
    if version >= 5:
        optional.add("oauth_jwt")
    _exact(table, {"anonymous_enabled"}, optional, "authentication")
    anonymous = _bool(table["anonymous_enabled"], "authentication.anonymous_enabled")
    adapters = _adapters(table.get("adapters", []))
    types = {adapter.type for adapter in adapters}
    has_bearer = OPERATOR_BEARER_ADAPTER_TYPE in types
    has_oauth = OAUTH_JWT_ADAPTER_TYPE in types
    if version >= 5 and has_bearer and has_oauth:
        fail("authentication.adapters.type")
    verifier_path: Path | None = None
    issuer: str | None = None
    if version >= 4:
        raw_path = _source_table(table, "operator_bearer", has_bearer, "verifier_path")
        if has_bearer:
            if not is_safe_absolute_path(raw_path):
                fail("authentication.operator_bearer.verifier_path")
            verifier_path = Path(raw_path)
    if version >= 5:
        raw_issuer = _source_table(table, "oauth_jwt", has_oauth, "issuer")
        if has_oauth:
            if not is_issuer(raw_issuer):
                fail("authentication.oauth_jwt.issuer")
            issuer = raw_issuer
    return AuthenticationSettings(
        anonymous_enabled=anonymous,
        adapters=adapters,
        operator_bearer_verifier_path=verifier_path,
        oauth_issuer=issuer,
    )


_LIFETIMES: Final = ("session_inactivity_timeout_seconds", "session_absolute_lifetime_seconds")
MAX_SESSIONS_PER_PRINCIPAL: Final = 1024


def _mcp(value: object, version: int) -> McpSettings:
    table = _table(value, "mcp")
    defaults = McpSettings()
    if version >= 8:
        # Schema 8 keeps every schema-7 key and makes each one optional.
        _exact(
            table,
            set(),
            {"strict_protocol_version", *_LIFETIMES, "max_sessions_per_principal"},
            "mcp",
        )
    else:
        required = {"strict_protocol_version"} | (set(_LIFETIMES) if version >= 7 else set())
        _exact(table, required, set(), "mcp")
    strict = _bool(
        table.get("strict_protocol_version", defaults.strict_protocol_version),
        "mcp.strict_protocol_version",
    )
    if version < 7:
        return McpSettings(strict_protocol_version=strict)
    inactivity, absolute = (
        _int(table.get(key, getattr(defaults, key)), 0, MAX_SESSION_LIFETIME_SECONDS, f"mcp.{key}")
        for key in _LIFETIMES
    )
    per_principal = _int(
        table.get("max_sessions_per_principal", defaults.max_sessions_per_principal),
        1,
        MAX_SESSIONS_PER_PRINCIPAL,
        "mcp.max_sessions_per_principal",
    )
    return McpSettings(
        strict_protocol_version=strict,
        session_inactivity_timeout_seconds=inactivity,
        session_absolute_lifetime_seconds=absolute,
        max_sessions_per_principal=per_principal,
    )


_TOP_LEVEL: Final = frozenset({"schema_version", "server", "plugins", "authentication", "mcp"})
_GOVERNANCE_TABLES: Final = frozenset({"policy", "audit", "approval"})


def host_configuration_from_document(document: dict[str, Any]) -> HostConfiguration:
    """Validate a `tomllib` document against the schema matrix of its `schema_version`."""
    version = _schema_version(document)
    allowed = _TOP_LEVEL | _GOVERNANCE_TABLES if version >= 8 else _TOP_LEVEL
    unknown = sorted(set(document) - allowed)
    if unknown:
        fail(unknown[0] if version >= 8 else "top level")
    server = _server(document.get("server"))
    plugins = _plugins(document.get("plugins"), version)
    authentication = AuthenticationSettings()
    # Schemas 3-7 require [authentication] and 6-7 require [mcp]; schema 8 accepts every
    # schema-7 file and lets both tables fall back to their defaults when absent.
    if version < 8 and (version >= 3) != ("authentication" in document):
        fail("authentication")
    if "authentication" in document:
        authentication = _authentication(document["authentication"], version)
    mcp = McpSettings()
    if version < 8 and (version >= 6) != ("mcp" in document):
        fail("mcp")
    if "mcp" in document:
        mcp = _mcp(document["mcp"], version)
    if version < 8:
        return HostConfiguration(
            schema_version=version,
            server=server,
            plugins=plugins,
            authentication=authentication,
            mcp=mcp,
            origin="loaded",
        )
    return HostConfiguration(
        schema_version=version,
        server=server,
        plugins=plugins,
        authentication=authentication,
        mcp=mcp,
        policy=policy_settings(document["policy"]) if "policy" in document else None,
        audit=audit_settings(document["audit"]) if "audit" in document else AuditSettings(),
        approval=(
            approval_settings(document["approval"])
            if "approval" in document
            else ApprovalSettings()
        ),
        origin="loaded",
    )

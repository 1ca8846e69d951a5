"""The host configuration schema matrix (versions 1-8): a parsed TOML document in, a frozen
`HostConfiguration` out.

Every failure is a `ConfigurationError` with a stable code and fixed message; its location
names the key path (`plugins[1].module`) and its detail says what the key takes and what
was found, for the operator's terminal. The loader adds the file and line.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, NoReturn

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
    is_adapter_route_token,
    is_module_name,
    is_safe_absolute_path,
    issuer_problem,
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
from mymcp.errors import ConfigurationError, found
from mymcp.logs import LOG_FORMATS, LOG_LEVELS
from mymcp.plugin._identity import is_plugin_id

__all__ = ["host_configuration_from_document"]

_KEBAB: Final = "lowercase kebab case (a-z, 0-9, single hyphens, a letter first), at most 64"
_SAFE_PATH: Final = "an absolute path without '~', '$', '%', NUL, '.' or '..'"


def _expected(where: str, expectation: str, value: object) -> NoReturn:
    raise ConfigurationError.at(
        "invalid_schema", where, f"expected {expectation}, got {found(value)}"
    )


def _table(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        _expected(where, "a table", value)
    return value


# Keys a later schema added to a table that older schemas already have, with the schema
# that added them: such a key in an older file needs a raised schema_version, not a fix.
_INTRODUCED: Final[Mapping[tuple[str, str], int]] = {
    ("server", "log_level"): 8,
    ("server", "log_format"): 8,
    ("plugins", "manifest_path"): 2,
    ("plugins", "module"): 2,
    ("plugins", "configuration"): 8,
    ("plugins", "binding"): 8,
    ("authentication", "operator_bearer"): 4,
    ("authentication", "oauth_jwt"): 5,
    ("mcp", "session_inactivity_timeout_seconds"): 7,
    ("mcp", "session_absolute_lifetime_seconds"): 7,
    ("mcp", "max_sessions_per_principal"): 8,
    ("mcp", "max_sessions"): 8,
}
_INDEX: Final = re.compile(r"\[\d+\]")


def _exact(table: dict[str, Any], required: set[str], optional: set[str], where: str) -> None:
    """Unknown keys are named with the keys the table takes; so are missing ones. A key
    that a later schema added says which schema_version it needs."""
    prefix = "" if where == "top level" else f"{where}."
    allowed = ", ".join(sorted(required | optional)) or "nothing"
    unknown = sorted(set(table) - required - optional)
    if unknown:
        introduced = _INTRODUCED.get((_INDEX.sub("", where), unknown[0]))
        if introduced is not None:
            raise ConfigurationError.at(
                "invalid_schema",
                prefix + unknown[0],
                f"{unknown[0]!r} needs schema_version = {introduced} or later; with this "
                f"schema_version {_named(where)} takes {allowed}",
            )
        raise ConfigurationError.at(
            "invalid_schema", prefix + unknown[0], f"unknown key; {_named(where)} takes {allowed}"
        )
    missing = sorted(required - set(table))
    if missing:
        raise ConfigurationError.at(
            "invalid_schema",
            prefix + missing[0],
            f"required key is missing; {_named(where)} takes {allowed}",
        )


def _named(where: str) -> str:
    if where == "top level":
        return "the top level"
    return f"[{where}]"


def _bool(value: object, where: str) -> bool:
    if type(value) is not bool:
        _expected(where, "true or false", value)
    return value


def _int(value: object, low: int, high: int, where: str) -> int:
    if type(value) is not int or not low <= value <= high:
        _expected(where, f"an integer from {low} to {high}", value)
    return value


def _choice(value: object, choices: tuple[str, ...], where: str) -> str:
    if not isinstance(value, str) or value not in choices:
        _expected(where, " or ".join(f'"{choice}"' for choice in choices), value)
    return value


def _schema_version(document: dict[str, Any]) -> int:
    if "schema_version" not in document:
        raise ConfigurationError.at(
            "invalid_schema", "schema_version", "required key is missing; the file starts with it"
        )
    value = document["schema_version"]
    if type(value) is not int:
        _expected("schema_version", "an integer from 1 to 8", value)
    if value not in SUPPORTED_SCHEMA_VERSIONS:
        raise ConfigurationError.at(
            "unsupported_schema_version",
            "schema_version",
            f"expected an integer from 1 to 8, got {value}",
        )
    return value


def _loopback(value: object) -> str:
    expectation = "a loopback IP literal (127.0.0.0/8 or ::1; no host names, no zone)"
    if not isinstance(value, str) or "%" in value:
        _expected("server.address", expectation, value)
    try:
        parsed = ipaddress.ip_address(value)
    except ValueError:
        _expected("server.address", expectation, value)
    loopback_v4 = parsed.version == 4 and parsed in ipaddress.ip_network("127.0.0.0/8")
    if not (loopback_v4 or parsed == ipaddress.IPv6Address("::1")):
        _expected("server.address", expectation, value)
    return str(parsed)


def _server(value: object, version: int) -> ServerSettings:
    if value is None:
        return ServerSettings()
    table = _table(value, "server")
    logging_keys = {"log_level", "log_format"} if version >= 8 else set()
    _exact(table, set(), {"address", "port", *logging_keys}, "server")
    defaults = ServerSettings()
    return ServerSettings(
        address=_loopback(table["address"]) if "address" in table else defaults.address,
        port=_int(table.get("port", defaults.port), 1, 65535, "server.port"),
        log_level=_choice(
            table.get("log_level", defaults.log_level), tuple(LOG_LEVELS), "server.log_level"
        ),
        log_format=_choice(
            table.get("log_format", defaults.log_format), LOG_FORMATS, "server.log_format"
        ),
    )


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    return value


def _plugin(entry: object, version: int, where: str) -> PluginDeclaration:
    table = _table(entry, where)
    if version == 1:
        _exact(table, {"id", "enabled"}, set(), where)
    else:
        optional = {"configuration", "binding"} if version >= 8 else set()
        _exact(table, {"id", "enabled", "manifest_path", "module"}, optional, where)
    plugin_id = table["id"]
    if not is_plugin_id(plugin_id):
        _expected(f"{where}.id", f"a plugin id: {_KEBAB} characters", plugin_id)
    if plugin_id == BUNDLED_PLUGIN_ID:
        raise ConfigurationError.at(
            "bundled_plugin_conflict", f"{where}.id", f"'{BUNDLED_PLUGIN_ID}' is the bundled plugin"
        )
    enabled = _bool(table["enabled"], f"{where}.enabled")
    if version == 1:
        return PluginDeclaration(id=plugin_id, enabled=enabled)
    if not is_safe_absolute_path(table["manifest_path"]):
        _expected(f"{where}.manifest_path", _SAFE_PATH, table["manifest_path"])
    if not is_module_name(table["module"]):
        _expected(
            f"{where}.module",
            "a Python module name (dot-separated identifiers, no keywords, 1-255 ASCII)",
            table["module"],
        )
    configuration: Mapping[str, Any] = MappingProxyType({})
    if "configuration" in table:
        configuration = _frozen(_table(table["configuration"], f"{where}.configuration"))
    binding = table.get("binding", "namespaced")
    if binding not in ("namespaced", "local"):
        _expected(f"{where}.binding", '"namespaced" (the default) or "local"', binding)
    return PluginDeclaration(
        id=plugin_id,
        enabled=enabled,
        manifest_path=Path(table["manifest_path"]),
        module=table["module"],
        configuration=configuration,
        binding=binding,
    )


def _plugins(value: object, version: int) -> tuple[PluginDeclaration, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        _expected("plugins", "an array of tables ([[plugins]])", value)
    declarations: list[PluginDeclaration] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(value):
        declaration = _plugin(entry, version, f"plugins[{index}]")
        if declaration.id in seen:
            raise ConfigurationError.at(
                "duplicate_plugin",
                f"plugins[{index}].id",
                f"{declaration.id!r} is already declared by plugins[{seen[declaration.id]}]",
            )
        seen[declaration.id] = index
        declarations.append(declaration)
    return tuple(declarations)


_ROUTE_GRAMMAR: Final = "a lowercase letter first, then a-z0-9 segments joined by '-' or '_'"


def _route(value: object, where: str) -> AdapterRoute:
    table = _table(value, where)
    _exact(table, {"source", "scheme"}, {"profile"}, where)
    if table["source"] != "authorization":
        _expected(f"{where}.source", '"authorization"', table["source"])
    if not is_adapter_route_token(table["scheme"]):
        _expected(f"{where}.scheme", _ROUTE_GRAMMAR, table["scheme"])
    profile = table.get("profile")
    if profile is not None and not is_adapter_route_token(profile):
        _expected(f"{where}.profile", _ROUTE_GRAMMAR, profile)
    return AdapterRoute(source="authorization", scheme=table["scheme"], profile=profile)


def _adapters(value: object) -> tuple[AdapterDeclaration, ...]:
    if not isinstance(value, list):
        _expected("authentication.adapters", "an array of tables", value)
    if len(value) > MAX_AUTHENTICATION_ADAPTERS:
        raise ConfigurationError.at(
            "authentication_adapter_limit_exceeded",
            "authentication.adapters",
            f"{len(value)} adapters are declared",
        )
    adapters: list[AdapterDeclaration] = []
    ids: dict[str, int] = {}
    routes: dict[AdapterRoute, int] = {}
    for index, entry in enumerate(value):
        where = f"authentication.adapters[{index}]"
        table = _table(entry, where)
        _exact(table, {"id", "type", "enabled", "route"}, set(), where)
        if not is_plugin_id(table["id"]):
            _expected(f"{where}.id", f"an adapter id: {_KEBAB} characters", table["id"])
        if not is_plugin_id(table["type"]):
            _expected(f"{where}.type", f"an adapter type: {_KEBAB} characters", table["type"])
        enabled = _bool(table["enabled"], f"{where}.enabled")
        route = _route(table["route"], f"{where}.route")
        if table["id"] in ids:
            earlier = ids[table["id"]]
            raise ConfigurationError.at(
                "duplicate_authentication_adapter_id",
                f"{where}.id",
                f"{table['id']!r} is already declared by authentication.adapters[{earlier}]",
            )
        if route in routes:
            raise ConfigurationError.at(
                "duplicate_authentication_adapter_route",
                f"{where}.route",
                f"the same route as authentication.adapters[{routes[route]}]",
            )
        ids[table["id"]] = index
        routes[route] = index
        adapters.append(AdapterDeclaration(table["id"], table["type"], enabled, route))
    return tuple(adapters)


def _source_table(table: dict[str, Any], key: str, adapter_type: str, declared: bool) -> Any:
    """`[authentication.<key>]`, present if and only if an adapter of `adapter_type` is."""
    where = f"authentication.{key}"
    if declared and key not in table:
        raise ConfigurationError.at(
            "invalid_schema", where, f"required because an adapter has type {adapter_type!r}"
        )
    if not declared and key in table:
        raise ConfigurationError.at(
            "invalid_schema", where, f"allowed only when an adapter has type {adapter_type!r}"
        )
    if not declared:
        return None
    inner = _table(table[key], where)
    field = "verifier_path" if key == "operator_bearer" else "issuer"
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
        raise ConfigurationError.at(
            "invalid_schema",
            "authentication.adapters",
            f"{OPERATOR_BEARER_ADAPTER_TYPE} and {OAUTH_JWT_ADAPTER_TYPE} cannot both be "
            "declared, even when one is disabled",
        )
    verifier_path: Path | None = None
    issuer: str | None = None
    if version >= 4:
        raw_path = _source_table(table, "operator_bearer", OPERATOR_BEARER_ADAPTER_TYPE, has_bearer)
        if has_bearer:
            if not is_safe_absolute_path(raw_path):
                _expected("authentication.operator_bearer.verifier_path", _SAFE_PATH, raw_path)
            verifier_path = Path(raw_path)
    if version >= 5:
        raw_issuer = _source_table(table, "oauth_jwt", OAUTH_JWT_ADAPTER_TYPE, has_oauth)
        if has_oauth:
            problem = issuer_problem(raw_issuer)
            if problem is not None:
                # The first rule that failed, not the whole grammar: an issuer copied from
                # a provider's page usually breaks one rule, and the operator should not
                # have to work out which.
                raise ConfigurationError.at(
                    "invalid_schema",
                    "authentication.oauth_jwt.issuer",
                    f"{problem}; got {found(raw_issuer)}",
                )
            issuer = raw_issuer
    return AuthenticationSettings(
        anonymous_enabled=anonymous,
        adapters=adapters,
        operator_bearer_verifier_path=verifier_path,
        oauth_issuer=issuer,
    )


_LIFETIMES: Final = ("session_inactivity_timeout_seconds", "session_absolute_lifetime_seconds")
MAX_SESSIONS_PER_PRINCIPAL: Final = 1024
# A session costs a few hundred bytes; the bound only keeps a typo from meaning "no bound".
MAX_SESSIONS: Final = 65536


def _mcp(value: object, version: int) -> McpSettings:
    table = _table(value, "mcp")
    defaults = McpSettings()
    if version >= 8:
        # Schema 8 keeps every schema-7 key and makes each one optional.
        optional = {
            "strict_protocol_version",
            *_LIFETIMES,
            "max_sessions_per_principal",
            "max_sessions",
        }
        _exact(table, set(), optional, "mcp")
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
    total = _int(
        table.get("max_sessions", defaults.max_sessions), 1, MAX_SESSIONS, "mcp.max_sessions"
    )
    if per_principal > total and "max_sessions_per_principal" not in table:
        per_principal = total  # the default quota, in a store made smaller than it
    elif per_principal > total:
        # One principal could then fill the store alone, and every session it opened
        # past that would end another principal's.
        raise ConfigurationError.at(
            "invalid_schema",
            "mcp.max_sessions_per_principal",
            f"{per_principal} is more than mcp.max_sessions ({total}), the sessions of all "
            "principals together: one principal could take every session",
        )
    return McpSettings(
        strict_protocol_version=strict,
        session_inactivity_timeout_seconds=inactivity,
        session_absolute_lifetime_seconds=absolute,
        max_sessions_per_principal=per_principal,
        max_sessions=total,
    )


_TOP_LEVEL: Final = frozenset({"schema_version", "server", "plugins", "authentication", "mcp"})
_GOVERNANCE_TABLES: Final = frozenset({"policy", "audit", "approval"})


def _required_table(document: dict[str, Any], name: str, versions: range, version: int) -> None:
    """Schemas 3-7 require [authentication] and 6-7 require [mcp]; earlier ones forbid
    them. Schema 8 accepts every schema-7 file and lets both fall back to defaults."""
    if version >= 8:
        return
    if version in versions and name not in document:
        raise ConfigurationError.at("invalid_schema", name, f"schema {version} requires [{name}]")
    if version not in versions and name in document:
        raise ConfigurationError.at(
            "invalid_schema", name, f"[{name}] needs schema_version {versions.start} or later"
        )


def host_configuration_from_document(document: dict[str, Any]) -> HostConfiguration:
    """Validate a `tomllib` document against the schema matrix of its `schema_version`."""
    version = _schema_version(document)
    allowed = _TOP_LEVEL | _GOVERNANCE_TABLES if version >= 8 else _TOP_LEVEL
    unknown = sorted(set(document) - allowed)
    if unknown:
        if unknown[0] in _GOVERNANCE_TABLES:
            raise ConfigurationError.at(
                "invalid_schema", unknown[0], f"[{unknown[0]}] needs schema_version = 8"
            )
        raise ConfigurationError.at(
            "invalid_schema",
            unknown[0],
            f"unknown key; the top level takes {', '.join(sorted(allowed))}",
        )
    server = _server(document.get("server"), version)
    plugins = _plugins(document.get("plugins"), version)
    _required_table(document, "authentication", range(3, 8), version)
    _required_table(document, "mcp", range(6, 8), version)
    authentication = AuthenticationSettings()
    if "authentication" in document:
        authentication = _authentication(document["authentication"], version)
    mcp = McpSettings()
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

"""The schema matrix: every key under every schema version 1-8."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mymcp.config import (
    DEFAULT_ABSOLUTE_LIFETIME_SECONDS,
    DEFAULT_INACTIVITY_TIMEOUT_SECONDS,
    HostConfiguration,
)
from tests.config.helpers import (
    BEARER_VERIFIER,
    EXAMPLE_MANIFEST,
    ISSUER,
    adapter,
    failure,
    minimal,
    parse,
    plugin,
)

ALL = frozenset(range(1, 9))
Mutation = Callable[[dict[str, Any], int], None]
Check = Callable[[HostConfiguration], None]


def _auth(document: dict[str, Any]) -> dict[str, Any]:
    return document.setdefault("authentication", {"anonymous_enabled": True})


def _server(document: dict[str, Any], _v: int) -> None:
    document["server"] = {"address": "::1", "port": 8123}


def _plugins_v1(document: dict[str, Any], _v: int) -> None:
    document["plugins"] = [{"id": "example", "enabled": False}]


def _plugins_v2(document: dict[str, Any], _v: int) -> None:
    document["plugins"] = [plugin(2, enabled=True)]


def _auth_present(document: dict[str, Any], _v: int) -> None:
    document["authentication"] = {"anonymous_enabled": False}


def _auth_absent(document: dict[str, Any], _v: int) -> None:
    document.pop("authentication", None)


def _adapters(document: dict[str, Any], _v: int) -> None:
    _auth(document)["adapters"] = [adapter(enabled=True)]


def _bearer(document: dict[str, Any], _v: int) -> None:
    auth = _auth(document)
    auth["adapters"] = [adapter(adapter_type="operator-bearer-v1")]
    auth["operator_bearer"] = {"verifier_path": BEARER_VERIFIER}


def _bearer_adapter_only(document: dict[str, Any], _v: int) -> None:
    _auth(document)["adapters"] = [adapter(adapter_type="operator-bearer-v1", enabled=True)]


def _bearer_table_only(document: dict[str, Any], _v: int) -> None:
    _auth(document)["operator_bearer"] = {"verifier_path": BEARER_VERIFIER}


def _oauth(document: dict[str, Any], _v: int) -> None:
    auth = _auth(document)
    auth["adapters"] = [adapter(adapter_type="oauth-jwt-jwks-v1")]
    auth["oauth_jwt"] = {"issuer": ISSUER}


def _oauth_adapter_only(document: dict[str, Any], _v: int) -> None:
    _auth(document)["adapters"] = [adapter(adapter_type="oauth-jwt-jwks-v1", enabled=True)]


def _oauth_table_only(document: dict[str, Any], _v: int) -> None:
    _auth(document)["oauth_jwt"] = {"issuer": ISSUER}


def _both_types_bearer_table(document: dict[str, Any], _v: int) -> None:
    auth = _auth(document)
    auth["adapters"] = [
        adapter("a", "operator-bearer-v1"),
        adapter("b", "oauth-jwt-jwks-v1", scheme="other"),
    ]
    auth["operator_bearer"] = {"verifier_path": BEARER_VERIFIER}


def _both_types_both_tables(document: dict[str, Any], v: int) -> None:
    _both_types_bearer_table(document, v)
    _auth(document)["oauth_jwt"] = {"issuer": ISSUER}


def _mcp_v6(document: dict[str, Any], _v: int) -> None:
    document["mcp"] = {"strict_protocol_version": False}


def _mcp_v7(document: dict[str, Any], _v: int) -> None:
    document["mcp"] = {
        "strict_protocol_version": False,
        "session_inactivity_timeout_seconds": 0,
        "session_absolute_lifetime_seconds": 2_592_000,
    }


def _mcp_absent(document: dict[str, Any], _v: int) -> None:
    document.pop("mcp", None)


def _unknown_top_level(document: dict[str, Any], _v: int) -> None:
    document["extra"] = 1


def _unknown_server_key(document: dict[str, Any], _v: int) -> None:
    document["server"] = {"host": "127.0.0.1"}


def _unknown_auth_key(document: dict[str, Any], _v: int) -> None:
    _auth(document)["anonymous"] = True


def _no_check(_config: HostConfiguration) -> None:
    pass


def _check_server(config: HostConfiguration) -> None:
    assert (config.server.address, config.server.port) == ("::1", 8123)


def _check_plugins_v1(config: HostConfiguration) -> None:
    (declaration,) = config.plugins
    assert (declaration.id, declaration.enabled, declaration.module) == ("example", False, None)


def _check_plugins_v2(config: HostConfiguration) -> None:
    (declaration,) = config.plugins
    assert declaration.manifest_path == Path(EXAMPLE_MANIFEST)
    assert (declaration.module, declaration.enabled) == ("example_plugin", True)


def _check_auth_present(config: HostConfiguration) -> None:
    assert config.authentication.anonymous_enabled is False


def _check_adapters(config: HostConfiguration) -> None:
    (declaration,) = config.authentication.adapters
    assert (declaration.id, declaration.type, declaration.enabled) == ("local", "custom-v1", True)
    assert (declaration.route.source, declaration.route.scheme) == ("authorization", "bearer")


def _check_bearer(config: HostConfiguration) -> None:
    assert config.authentication.operator_bearer_verifier_path == Path(BEARER_VERIFIER)


def _check_oauth(config: HostConfiguration) -> None:
    assert config.authentication.oauth_issuer == ISSUER


def _check_mcp_v6(config: HostConfiguration) -> None:
    assert config.mcp.strict_protocol_version is False
    assert config.mcp.session_inactivity_timeout_seconds == DEFAULT_INACTIVITY_TIMEOUT_SECONDS
    assert config.mcp.session_absolute_lifetime_seconds == DEFAULT_ABSOLUTE_LIFETIME_SECONDS


def _check_mcp_v7(config: HostConfiguration) -> None:
    assert config.mcp.strict_protocol_version is False
    assert config.mcp.session_inactivity_timeout_seconds == 0
    assert config.mcp.session_absolute_lifetime_seconds == 2_592_000


CASES: list[tuple[str, Mutation, frozenset[int], Check]] = [
    ("server", _server, ALL, _check_server),
    ("plugins_v1_fields", _plugins_v1, frozenset({1}), _check_plugins_v1),
    ("plugins_v2_fields", _plugins_v2, frozenset(range(2, 9)), _check_plugins_v2),
    ("authentication_present", _auth_present, frozenset(range(3, 9)), _check_auth_present),
    ("authentication_absent", _auth_absent, frozenset({1, 2, 8}), _no_check),
    ("authentication_adapters", _adapters, frozenset(range(3, 9)), _check_adapters),
    ("operator_bearer", _bearer, frozenset(range(4, 9)), _check_bearer),
    ("bearer_adapter_without_table", _bearer_adapter_only, frozenset({3}), _no_check),
    ("bearer_table_without_adapter", _bearer_table_only, frozenset(), _no_check),
    ("oauth_jwt", _oauth, frozenset(range(5, 9)), _check_oauth),
    ("oauth_adapter_without_table", _oauth_adapter_only, frozenset({3, 4}), _no_check),
    ("oauth_table_without_adapter", _oauth_table_only, frozenset(), _no_check),
    ("both_types_bearer_table", _both_types_bearer_table, frozenset({4}), _check_bearer),
    ("both_types_both_tables", _both_types_both_tables, frozenset(), _no_check),
    ("mcp_v6_keys", _mcp_v6, frozenset({6, 8}), _check_mcp_v6),
    ("mcp_v7_keys", _mcp_v7, frozenset({7, 8}), _check_mcp_v7),
    ("mcp_absent", _mcp_absent, frozenset({1, 2, 3, 4, 5, 8}), _no_check),
    ("unknown_top_level_key", _unknown_top_level, frozenset(), _no_check),
    ("unknown_server_key", _unknown_server_key, frozenset(), _no_check),
    ("unknown_authentication_key", _unknown_auth_key, frozenset(), _no_check),
]


@pytest.mark.parametrize("version", sorted(ALL))
@pytest.mark.parametrize(
    ("mutate", "allowed", "check"),
    [pytest.param(m, a, c, id=name) for name, m, a, c in CASES],
)
def test_key_by_schema_version(
    version: int, mutate: Mutation, allowed: frozenset[int], check: Check
) -> None:
    document = minimal(version)
    mutate(document, version)
    if version in allowed:
        config = parse(document)
        assert config.schema_version == version
        assert config.origin == "loaded"
        check(config)
    else:
        assert failure(document).code == "invalid_schema"


@pytest.mark.parametrize("version", sorted(ALL))
def test_minimal_document_defaults(version: int) -> None:
    config = parse(minimal(version))
    assert config.server.address == "127.0.0.1"
    assert config.server.port == 8000
    assert config.plugins == ()
    assert config.authentication.anonymous_enabled is True
    assert config.authentication.adapters == ()
    assert config.authentication.operator_bearer_verifier_path is None
    assert config.authentication.oauth_issuer is None
    assert config.mcp.strict_protocol_version is True
    assert config.mcp.session_inactivity_timeout_seconds == 1800
    assert config.mcp.session_absolute_lifetime_seconds == 28800


@pytest.mark.parametrize(
    ("version", "missing"),
    [
        (6, "strict_protocol_version"),
        (7, "strict_protocol_version"),
        (7, "session_inactivity_timeout_seconds"),
        (7, "session_absolute_lifetime_seconds"),
    ],
)
def test_mcp_keys_are_all_required(version: int, missing: str) -> None:
    document = minimal(version)
    del document["mcp"][missing]
    assert failure(document).code == "invalid_schema"


@pytest.mark.parametrize("version", range(3, 8))
def test_anonymous_enabled_is_required(version: int) -> None:
    document = minimal(version)
    document["authentication"] = {"adapters": []}
    assert failure(document).code == "invalid_schema"


@pytest.mark.parametrize("version", range(2, 8))
@pytest.mark.parametrize("missing", ["id", "enabled", "manifest_path", "module"])
def test_schema2_plugin_fields_are_all_required(version: int, missing: str) -> None:
    document = minimal(version)
    entry = plugin(version)
    del entry[missing]
    document["plugins"] = [entry]
    assert failure(document).code == "invalid_schema"


@pytest.mark.parametrize("missing", ["id", "enabled"])
def test_schema1_plugin_fields_are_all_required(missing: str) -> None:
    entry = plugin(1)
    del entry[missing]
    assert failure({"schema_version": 1, "plugins": [entry]}).code == "invalid_schema"


def test_errors_name_the_key_path_and_what_the_key_takes() -> None:
    document = minimal(7)
    del document["mcp"]["session_absolute_lifetime_seconds"]
    error = failure(document)
    assert error.message == "MyMCP configuration does not match its schema"
    assert error.location.key == "mcp.session_absolute_lifetime_seconds"
    assert error.detail == "required key is missing; [mcp] takes " + ", ".join(
        sorted(
            {
                "strict_protocol_version",
                "session_inactivity_timeout_seconds",
                "session_absolute_lifetime_seconds",
            }
        )
    )
    document = minimal(7)
    document["server"] = {"port": "8000"}
    error = failure(document)
    assert error.location.key == "server.port"
    assert error.detail == 'expected an integer from 1 to 65535, got "8000" (a string)'
    document = minimal(7)
    document["server"] = {"prot": 8000}
    error = failure(document)
    assert error.location.key == "server.prot"
    assert error.detail == "unknown key; [server] takes address, port"
    document = minimal(7)
    document["surprise-key"] = 1
    assert failure(document).location.key == "surprise-key"
    assert "surprise-key" not in failure(document).message

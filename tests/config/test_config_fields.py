"""The host configuration's field rules, one table per key, plus property tests for the
grammars."""

from __future__ import annotations

import datetime
import json
import keyword
import string
import unicodedata
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.config import parse_host_configuration
from mymcp.config._grammar import (
    is_adapter_route_token,
    is_issuer,
    is_module_name,
    is_safe_absolute_path,
    issuer_problem,
)
from mymcp.errors import ConfigurationError, found, shown
from mymcp.plugin import is_plugin_id
from tests.config.helpers import adapter, failure, minimal, parse, plugin, to_toml
from tests.test_strictjson import plain_json


def _with_server(**server: Any) -> dict[str, Any]:
    document = minimal(7)
    document["server"] = server
    return document


def _with_plugin(**fields: Any) -> dict[str, Any]:
    document = minimal(7)
    entry = plugin(7)
    entry.update(fields)
    document["plugins"] = [entry]
    return document


def _with_adapters(*adapters: dict[str, Any], **extra: Any) -> dict[str, Any]:
    document = minimal(7)
    document["authentication"].update(adapters=list(adapters), **extra)
    return document


# --- schema_version -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["7", 7.0, True, False, [7], {"v": 7}])
def test_schema_version_must_be_a_native_int(value: Any) -> None:
    document = minimal(7)
    document["schema_version"] = value
    assert failure(document).code == "invalid_schema"


def test_schema_version_is_required() -> None:
    document = minimal(7)
    del document["schema_version"]
    assert failure(document).code == "invalid_schema"


@pytest.mark.parametrize("value", [0, -1, 9, 10, 2**40])
def test_schema_version_out_of_range_is_unsupported(value: int) -> None:
    assert failure({"schema_version": value}).code == "unsupported_schema_version"


# --- server ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.1.2.3", "127.1.2.3"),
        ("127.255.255.255", "127.255.255.255"),
        ("::1", "::1"),
        ("0:0:0:0:0:0:0:1", "::1"),
    ],
)
def test_loopback_addresses_are_accepted(value: str, stored: str) -> None:
    assert parse(_with_server(address=value)).server.address == stored


@pytest.mark.parametrize(
    "value",
    [
        "localhost",
        "0.0.0.0",
        "10.0.0.1",
        "128.0.0.1",
        "::",
        "::2",
        "::1%lo",
        "fe80::1%eth0",
        "::ffff:127.0.0.1",
        "[::1]",
        " 127.0.0.1",
        "127.0.0.1:80",
        "",
        1,
        True,
    ],
)
def test_non_loopback_addresses_are_rejected(value: Any) -> None:
    assert failure(_with_server(address=value)).code == "invalid_schema"


@pytest.mark.parametrize("value", [1, 80, 65535])
def test_ports_in_range_are_accepted(value: int) -> None:
    assert parse(_with_server(port=value)).server.port == value


@pytest.mark.parametrize("value", [0, -1, 65536, True, "8000", 8000.0])
def test_invalid_ports_are_rejected(value: Any) -> None:
    assert failure(_with_server(port=value)).code == "invalid_schema"


@pytest.mark.parametrize("value", ["127.0.0.1", 8000, [1]])
def test_server_must_be_a_table(value: Any) -> None:
    document = minimal(7)
    document["server"] = value
    assert failure(document).code == "invalid_schema"


# --- plugins --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a", "abc", "abc-def", "a1-2b-c3", "a" * 64, "example-plugin"])
def test_valid_plugin_ids(value: str) -> None:
    assert parse(_with_plugin(id=value)).plugins[0].id == value


@pytest.mark.parametrize(
    "value", ["", "A", "1a", "-a", "a-", "a--b", "a_b", "a b", "é", "a" * 65, 1, True]
)
def test_invalid_plugin_ids(value: Any) -> None:
    assert failure(_with_plugin(id=value)).code == "invalid_schema"


@pytest.mark.parametrize("value", ["true", 1, 0])
def test_enabled_must_be_a_native_bool(value: Any) -> None:
    assert failure(_with_plugin(enabled=value)).code == "invalid_schema"


@pytest.mark.parametrize("value", ["/a/b.json", "/a//b.json", "/opt/x y/m.json", "/.hidden/m"])
def test_valid_manifest_paths(value: str) -> None:
    assert parse(_with_plugin(manifest_path=value)).plugins[0].manifest_path == Path(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "relative/manifest.json",
        "manifest.json",
        "~/manifest.json",
        "/a/~/m.json",
        "/a/$HOME/m.json",
        "/a/%APPDATA%/m.json",
        "/a/\x00/m.json",
        "/a/./m.json",
        "/a/../m.json",
        "/a/..",
        "/a/.",
        "/a\\..\\m.json",
        "/a\\.\\m.json",
        1,
    ],
)
def test_invalid_manifest_paths_even_when_disabled(value: Any) -> None:
    assert failure(_with_plugin(manifest_path=value, enabled=False)).code == "invalid_schema"


@pytest.mark.parametrize(
    "value", ["a", "plugin", "a.b.c", "_private._x1", "match", "A" * 255, "mymcp_example_plugin"]
)
def test_valid_module_names(value: str) -> None:
    assert parse(_with_plugin(module=value)).plugins[0].module == value


@pytest.mark.parametrize(
    "value",
    ["", ".a", "a.", "a..b", "1a", "a-b", "a b", "class", "a.def", "é", "A" * 256, "a/b", 1],
)
def test_invalid_module_names(value: Any) -> None:
    assert failure(_with_plugin(module=value)).code == "invalid_schema"


@pytest.mark.parametrize("value", ["x", 1, {"id": "x"}])
def test_plugins_must_be_an_array_of_tables(value: Any) -> None:
    document = minimal(7)
    document["plugins"] = value if not isinstance(value, dict) else [value, "x"]
    assert failure(document).code == "invalid_schema"


def test_plugins_keep_declaration_order() -> None:
    document = minimal(2)
    document["plugins"] = [plugin(2, "zeta"), plugin(2, "alpha", enabled=True), plugin(2, "mid")]
    assert [p.id for p in parse(document).plugins] == ["zeta", "alpha", "mid"]


# --- authentication -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", 1, None])
def test_anonymous_enabled_must_be_a_native_bool(value: Any) -> None:
    document = minimal(7)
    if value is None:
        document["authentication"] = {}
    else:
        document["authentication"]["anonymous_enabled"] = value
    assert failure(document).code == "invalid_schema"


def test_thirty_two_adapters_are_accepted() -> None:
    adapters = [adapter(f"a{i}", scheme=f"s{i}") for i in range(32)]
    assert len(parse(_with_adapters(*adapters)).authentication.adapters) == 32


@pytest.mark.parametrize(
    "entry",
    [
        {"id": "a", "type": "t", "enabled": False},
        {"id": "a", "type": "t", "enabled": False, "route": {"source": "authorization"}},
        {**adapter(), "extra": 1},
        {**adapter(), "id": "A"},
        {**adapter(), "id": "a" * 65},
        {**adapter(), "type": ""},
        {**adapter(), "type": "Custom"},
        {**adapter(), "type": "t" * 65},
        {**adapter(), "enabled": "no"},
        {**adapter(), "route": "authorization bearer"},
        {**adapter(), "route": {"source": "header", "scheme": "bearer"}},
        {**adapter(), "route": {"source": "authorization", "scheme": "Bearer"}},
        {**adapter(), "route": {"source": "authorization", "scheme": "b", "x": "y"}},
        adapter(scheme="1bearer"),
        adapter(scheme="a--b"),
        adapter(scheme="a-_b"),
        adapter(scheme="a" * 65),
        adapter(profile="Bad"),
        adapter(profile="a_"),
        "not-a-table",
    ],
)
def test_invalid_adapter_entries(entry: Any) -> None:
    assert failure(_with_adapters(entry)).code == "invalid_schema"


def test_adapters_must_be_an_array() -> None:
    document = minimal(7)
    document["authentication"]["adapters"] = adapter()
    assert failure(document).code == "invalid_schema"


def test_route_with_profile_is_kept() -> None:
    config = parse(_with_adapters(adapter(scheme="x_token-v2", profile="p-1_b")))
    route = config.authentication.adapters[0].route
    assert (route.scheme, route.profile) == ("x_token-v2", "p-1_b")


def test_routes_differing_only_in_profile_are_distinct() -> None:
    config = parse(
        _with_adapters(adapter("a"), adapter("b", profile="p"), adapter("c", profile="q"))
    )
    assert len(config.authentication.adapters) == 3


@pytest.mark.parametrize(
    "value",
    ["/a/../v.json", "relative.json", "", "~/v.json", "/a/$X/v.json", "/a/%X%/v.json", 1],
)
def test_invalid_verifier_paths(value: Any) -> None:
    document = _with_adapters(
        adapter(adapter_type="operator-bearer-v1"), operator_bearer={"verifier_path": value}
    )
    assert failure(document).code == "invalid_schema"


@pytest.mark.parametrize("table", [{}, {"verifier_path": "/v.json", "mode": 1}, "/v.json"])
def test_operator_bearer_table_is_exact(table: Any) -> None:
    document = _with_adapters(adapter(adapter_type="operator-bearer-v1"), operator_bearer=table)
    assert failure(document).code == "invalid_schema"


VALID_ISSUERS = [
    "https://issuer.example",
    "https://issuer.example/",
    "https://login.example.com/tenant/v2.0",
    "https://a-b.example:443/realms/x",
    "https://1.example",
    "https://auth.example/a@b",
]
INVALID_ISSUERS = [
    "http://issuer.example",
    "HTTPS://issuer.example",
    "https://Issuer.example",
    "https://user@issuer.example",
    "https://issuer.example?x=1",
    "https://issuer.example#frag",
    "https://issuer.example/%2F",
    "https://issuer.example:8443",
    "https://issuer.example:",
    "https://[::1]",
    "https://127.0.0.1",
    "https://localhost",
    "https://auth.localhost",
    "https://issuer",
    "https://-bad.example",
    "https://bad-.example",
    "https://a..example",
    "https://issuer.example.",
    "https://" + "a" * 64 + ".example",
    "https://issuer.example/path/",
    "https://issuer.example//x",
    "https://issuer.example/./x",
    "https://issuer.example/a/..",
    "https://issuer.example/ x",
    "https://issuér.example",
    "",
    1,
]


@pytest.mark.parametrize("value", VALID_ISSUERS)
def test_valid_issuers(value: str) -> None:
    document = _with_adapters(
        adapter(adapter_type="oauth-jwt-jwks-v1"), oauth_jwt={"issuer": value}
    )
    assert parse(document).authentication.oauth_issuer == value


@pytest.mark.parametrize("value", INVALID_ISSUERS)
def test_invalid_issuers(value: Any) -> None:
    document = _with_adapters(
        adapter(adapter_type="oauth-jwt-jwks-v1"), oauth_jwt={"issuer": value}
    )
    assert failure(document).code == "invalid_schema"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("https://issuer.example:8443", "the port must be absent or 443"),
        ("https://issuer.example:", "the port must be absent or 443"),
        ("https://issuer.example/realms/dev/", "the path must not end with '/'"),
        ("https://issuer", "the host needs a dot (a DNS name, not localhost or an IP)"),
        ("https://localhost", "the host needs a dot"),
        ("https://auth.localhost", "must not be localhost"),
        ("https://127.0.0.1", "not an IP address"),
        ("https://[::1]", "no IPv6 literal"),
        ("https://issuer.example//x", "must not contain '//'"),
        ("https://issuer.example/./x", "'.' or '..' segments"),
        ("https://issuer.example/a/..", "'.' or '..' segments"),
        ("https://issuer.example#", "not even an empty one"),
        ("https://Issuer.example", "the host must be lowercase"),
        ("https://user@issuer.example", "user information"),
        ("https://issuer.example?x=1", "query"),
        ("https://issuer.example/%2F", "'%'"),
        ("http://issuer.example", "must start with 'https://'"),
        ("https://issuer.example/ x", "printable ASCII without spaces"),
        ("https://a..example", "the host's labels must be"),
        ("https://issuer.example/a\\b", "the path may hold only"),
        ("https://", "needs a host"),
        (1, "must be a string"),
    ],
)
def test_an_invalid_issuer_names_the_rule_it_breaks(value: Any, problem: str) -> None:
    document = _with_adapters(
        adapter(adapter_type="oauth-jwt-jwks-v1"), oauth_jwt={"issuer": value}
    )
    error = failure(document)
    assert error.code == "invalid_schema"
    assert error.location.key == "authentication.oauth_jwt.issuer"
    assert error.detail is not None
    assert problem in error.detail
    assert error.detail.endswith(f"; got {found(value)}")


def test_authentication_composition_checks_are_left_to_composition() -> None:
    # An enabled OAuth adapter on a non-bearer route with anonymous access loads here;
    # route and anonymous rules belong to authentication composition.
    document = _with_adapters(
        adapter(adapter_type="oauth-jwt-jwks-v1", enabled=True, scheme="dpop"),
        oauth_jwt={"issuer": "https://issuer.example"},
    )
    assert parse(document).authentication.anonymous_enabled is True


# --- mcp ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", 1])
def test_strict_protocol_version_must_be_bool(value: Any) -> None:
    document = minimal(7)
    document["mcp"]["strict_protocol_version"] = value
    assert failure(document).code == "invalid_schema"


@pytest.mark.parametrize(
    "key", ["session_inactivity_timeout_seconds", "session_absolute_lifetime_seconds"]
)
@pytest.mark.parametrize("value", [-1, 2_592_001, True, 1.5, "60", 60.0])
def test_invalid_lifetimes(key: str, value: Any) -> None:
    document = minimal(7)
    document["mcp"][key] = value
    assert failure(document).code == "invalid_schema"


# --- property tests for the grammars ---------------------------------------------------

KEBAB = r"[a-z][a-z0-9]*(-[a-z0-9]+)*"
ROUTE = r"[a-z][a-z0-9]*([-_][a-z0-9]+)*"
ID_ALPHABET = st.sampled_from(string.ascii_lowercase + string.digits + "-_A.")


def _kebab_oracle(value: str) -> bool:
    segments = value.split("-")
    return (
        0 < len(value) <= 64
        and value[0] in string.ascii_lowercase
        and all(s and set(s) <= set(string.ascii_lowercase + string.digits) for s in segments)
    )


@given(st.from_regex(KEBAB, fullmatch=True))
def test_generated_kebab_ids_are_plugin_ids(value: str) -> None:
    assert is_plugin_id(value) == (len(value) <= 64)


@given(st.text(ID_ALPHABET, max_size=70))
def test_plugin_id_grammar_matches_its_definition(value: str) -> None:
    assert is_plugin_id(value) == _kebab_oracle(value)


@given(st.text(ID_ALPHABET, min_size=1, max_size=20))
def test_plugin_ids_go_through_the_loader_like_the_grammar(value: str) -> None:
    document = _with_plugin(id=value)
    if value == "mnemosyne":
        return
    if _kebab_oracle(value):
        assert parse(document).plugins[0].id == value
    else:
        assert failure(document).code == "invalid_schema"


@given(st.from_regex(ROUTE, fullmatch=True))
def test_generated_route_tokens(value: str) -> None:
    assert is_adapter_route_token(value) == (len(value) <= 64)


@given(st.text(ID_ALPHABET, max_size=70))
def test_route_token_grammar_matches_its_definition(value: str) -> None:
    segments = value.replace("_", "-").split("-")
    expected = (
        0 < len(value) <= 64
        and value[0] in string.ascii_lowercase
        and all(s and set(s) <= set(string.ascii_lowercase + string.digits) for s in segments)
    )
    assert is_adapter_route_token(value) == expected


IDENTIFIER = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)


@given(st.lists(IDENTIFIER, min_size=1, max_size=5))
def test_dotted_identifiers_are_module_names_unless_keywords(parts: list[str]) -> None:
    value = ".".join(parts)
    assert is_module_name(value) == (not any(keyword.iskeyword(p) for p in parts))


@given(st.text(st.characters(codec="utf-8"), max_size=30))
def test_module_names_are_ascii_dotted_identifiers(value: str) -> None:
    expected = (
        0 < len(value) <= 255
        and value.isascii()
        and all(p.isidentifier() and not keyword.iskeyword(p) for p in value.split("."))
    )
    assert is_module_name(value) == expected


PATH_SEGMENT = st.text(st.sampled_from("ab.~$%\\ -"), min_size=0, max_size=4)


@given(st.lists(PATH_SEGMENT, min_size=1, max_size=5), st.booleans())
def test_manifest_path_grammar(segments: list[str], absolute: bool) -> None:
    value = ("/" if absolute else "") + "/".join(segments)
    components = value.replace("\\", "/").split("/")
    expected = (
        value.startswith("/")
        and not set(value) & set("~$%")
        and not any(c in (".", "..") for c in components)
    )
    assert is_safe_absolute_path(value) == expected
    document = _with_plugin(manifest_path=value)
    if expected:
        assert parse(document).plugins[0].manifest_path == Path(value)
    else:
        assert failure(document).code == "invalid_schema"


LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


@given(
    st.lists(LABEL, min_size=2, max_size=4),
    st.lists(st.from_regex(r"[A-Za-z0-9_.-]{1,6}", fullmatch=True), max_size=3),
    st.booleans(),
)
def test_issuer_grammar(labels: list[str], path: list[str], port: bool) -> None:
    host = ".".join(labels)
    value = "https://" + host + (":443" if port else "") + "".join("/" + p for p in path)
    expected = (
        not all(label.isdigit() for label in labels)
        and labels[-1] != "localhost"
        and not any(p in (".", "..") for p in path)
    )
    assert is_issuer(value) == expected


# Issuer-like text: each part is well-formed four times in five and otherwise breaks a
# rule, so both answers, and every rule, come up often.
def _mostly(good: st.SearchStrategy[str], *bad: str) -> st.SearchStrategy[str]:
    # (Hypothesis draws the ends of an integer range far more often than the middle.)
    return st.tuples(st.integers(0, 8), good, st.sampled_from(bad)).map(
        lambda drawn: drawn[2] if drawn[0] in (3, 6) else drawn[1]
    )


_ISSUER_SCHEME = _mostly(st.just("https://"), "http://", "HTTPS://", "", "https:/")
_ISSUER_USERINFO = _mostly(st.just(""), "user@", "@")
_ISSUER_LABEL = _mostly(LABEL, "", "localhost", "Upper", "-a", "a-", "127", "a" * 64)
_ISSUER_PORT = _mostly(st.sampled_from(["", ":443"]), ":8443", ":", ":0443", ":443:1")
_ISSUER_SEGMENT = _mostly(
    st.from_regex(r"[A-Za-z0-9._~!$&'()*+,;=:@-]{1,5}", fullmatch=True),
    *["", ".", "..", "%2F", "a b", "a\\b", "é", "[x]", "a?b", "a#", '"', "{", "^"],
)
_ISSUER_TAIL = _mostly(st.sampled_from(["", "/"]), "?", "?x=1", "#", "#f")


@st.composite
def _issuer_like(draw: st.DrawFn) -> str:
    host = ".".join(draw(st.lists(_ISSUER_LABEL, min_size=1, max_size=4)))
    path = draw(st.lists(_ISSUER_SEGMENT, max_size=4))
    return (
        draw(_ISSUER_SCHEME)
        + draw(_ISSUER_USERINFO)
        + host
        + draw(_ISSUER_PORT)
        + "".join("/" + segment for segment in path)
        + draw(_ISSUER_TAIL)
    )


@given(st.one_of(_issuer_like(), st.text(max_size=40), st.integers(), st.none()))
def test_an_issuer_is_refused_with_one_rule_in_one_line(value: object) -> None:
    # Whatever is written, the answer is an issuer or one rule in words for a terminal.
    problem = issuer_problem(value)
    assert is_issuer(value) == (problem is None)
    if problem is not None:
        assert problem.isascii()
        assert problem.isprintable()
        assert problem.startswith("the ")
    elif isinstance(value, str):  # what the grammar accepts, the configuration takes
        document = _with_adapters(
            adapter(adapter_type="oauth-jwt-jwks-v1"), oauth_jwt={"issuer": value}
        )
        assert parse(document).authentication.oauth_issuer == value


@given(st.text(max_size=40))
def test_unknown_keys_fail_cleanly_whatever_their_value(value: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_host_configuration(to_toml({"schema_version": 7, "x": value}).encode())
    assert caught.value.code == "invalid_schema"


def test_schema_8_session_store_size_is_bounded_and_optional() -> None:
    assert parse({"schema_version": 8}).mcp.max_sessions == 1024
    assert parse({"schema_version": 8, "mcp": {"max_sessions": 65536}}).mcp.max_sessions == 65536
    for bad in (0, 65537, True, "1024", 10.0):
        refused = failure({"schema_version": 8, "mcp": {"max_sessions": bad}})
        assert (refused.code, refused.location.key) == ("invalid_schema", "mcp.max_sessions")
    # Schema 7 does not know the key, and says which schema does.
    too_old = minimal(7)
    too_old["mcp"]["max_sessions"] = 8
    assert "schema_version = 8" in str(failure(too_old))


def test_a_quota_above_the_store_is_refused_unless_it_is_the_default() -> None:
    smaller = parse({"schema_version": 8, "mcp": {"max_sessions": 10}}).mcp
    assert (smaller.max_sessions, smaller.max_sessions_per_principal) == (10, 10)
    both = {"max_sessions": 10, "max_sessions_per_principal": 10}
    assert parse({"schema_version": 8, "mcp": both}).mcp.max_sessions_per_principal == 10
    refused = failure(
        {"schema_version": 8, "mcp": {"max_sessions": 10, "max_sessions_per_principal": 11}}
    )
    assert (refused.code, refused.location.key) == (
        "invalid_schema",
        "mcp.max_sessions_per_principal",
    )
    assert "11 is more than mcp.max_sessions (10)" in str(refused)


def test_schema_8_session_quota_is_bounded_and_optional() -> None:
    assert parse({"schema_version": 8}).mcp.max_sessions_per_principal == 64
    assert (
        parse(
            {"schema_version": 8, "mcp": {"max_sessions_per_principal": 3}}
        ).mcp.max_sessions_per_principal
        == 3
    )
    for bad in (0, 1025, True, "64"):
        assert (
            failure({"schema_version": 8, "mcp": {"max_sessions_per_principal": bad}}).code
            == "invalid_schema"
        )


@given(plain_json)
def test_a_value_found_is_spelled_as_toml_and_json_spell_it(value: object) -> None:
    text = shown(value)
    if not text.endswith("..."):
        assert json.loads(text) == value  # `"8000"`, `true`, `null`, `[1, 2]`, not `'8000'`, `True`
    # Nothing the terminal would act on or hide: no control, format or unassigned character.
    assert not [c for c in text if unicodedata.category(c)[0] == "C" or c in "\u2028\u2029"]


def test_a_value_found_is_escaped_and_readable() -> None:
    assert shown(True) == "true"
    assert shown(("a", MappingProxyType({"b": None}))) == '["a", {"b": null}]'
    assert shown("café\x1b[2J\u202e") == '"café\\u001b[2J\\u202e"'
    assert shown(datetime.date(2026, 12, 4)) == "2026-12-04"  # a TOML date
    assert (shown(float("inf")), shown(float("-inf")), shown(float("nan"))) == (
        "inf",
        "-inf",
        "nan",
    )  # as TOML spells them; JSON has no words for them
    assert shown({"a": MappingProxyType({"b": (1, 2)})}) == '{"a": {"b": [1, 2]}}'
    assert shown("x" * 100) == '"' + "x" * 76 + "..."

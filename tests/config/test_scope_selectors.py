"""A policy may name only OAuth scopes that authentication keeps from a token.

A `scope:` selector no token can satisfy would make the step-up 403 ask for a scope the
client can never bring back, so it loops; the configuration refuses such selectors.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.auth._oauth import token_scopes
from mymcp.config import parse_principal_selector
from mymcp.errors import ConfigurationError
from tests.config.helpers import failure, minimal, parse

# `*` is the selector's glob, so it is left out of the values named exactly.
NOT_GLOB = st.characters(blacklist_characters="*")
ASCII_NOT_GLOB = st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters="*")
SCOPE_TEXT = st.one_of(
    st.text(NOT_GLOB, max_size=12),
    st.text(ASCII_NOT_GLOB, min_size=1, max_size=12),
    # Around the longest scope authentication keeps.
    st.text(ASCII_NOT_GLOB, min_size=124, max_size=132),
)


def _kept(scope: str) -> bool:
    """Whether authentication keeps `scope` from a token that carries it."""
    return token_scopes({"scp": [scope]}) == {scope}


def _accepted(text: str) -> bool:
    try:
        parse_principal_selector(text)
    except ConfigurationError as exc:
        if exc.code != "policy_invalid_principal":
            raise
        return False
    return True


def _escaped(value: str) -> str:
    """`value` as a selector names it: a backslash before `*` or another backslash
    escapes it, so a value ending in a backslash must say so."""
    return value.replace("\\", "\\\\").replace("*", "\\*")


@given(SCOPE_TEXT)
def test_a_scope_selector_is_accepted_exactly_when_tokens_keep_that_scope(scope: str) -> None:
    assert _accepted(f"scope:{_escaped(scope)}") == _kept(scope)


@given(SCOPE_TEXT)
def test_a_scope_prefix_is_accepted_exactly_when_a_kept_scope_can_start_with_it(
    scope: str,
) -> None:
    # A prefix matches the scope equal to it too, and no longer scope is kept unless that
    # one is, so the prefix itself decides.
    assert _accepted(f"scope:{_escaped(scope)}*") == (scope == "" or _kept(scope))


def _with_selector(selector: str) -> dict[str, object]:
    document = minimal(8)
    document["policy"] = {"rules": [{"principals": [selector], "allow": ["@read_only"]}]}
    return document


@pytest.mark.parametrize(
    "selector",
    [
        "scope:m\u00e9moire.\u00e9crire",
        "scope:m\u00e9moire*",
        "scope:" + "a" * 129,
        "scope:" + "a" * 129 + "*",
        "scope:tab\there",
    ],
)
def test_a_configuration_naming_a_scope_no_token_keeps_is_refused(selector: str) -> None:
    error = failure(_with_selector(selector))
    assert error.code == "policy_invalid_principal"
    assert error.location.key == "policy.rules[0].principals[0]"


@pytest.mark.parametrize(
    "selector", ["scope:memory.write", "scope:" + "a" * 128, "scope:" + "a" * 128 + "*", "scope:*"]
)
def test_a_configuration_naming_a_kept_scope_loads(selector: str) -> None:
    policy = parse(_with_selector(selector)).policy
    assert policy is not None
    assert [principal.text for principal in policy.rules[0].principals] == [selector]

"""Policy evaluation against a brute-force oracle, step-up, caching and the grammar."""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mymcp.config import (
    is_valid_subject,
    parse_host_configuration,
    parse_principal_selector,
    parse_tool_selector,
)
from mymcp.errors import ConfigurationError
from mymcp.governance import Policy
from mymcp.plugin import Consent, ToolEffects
from mymcp.runtime import compose_runtime
from tests.config.helpers import to_toml
from tests.synthetic import contribution, external_bindings, tool

READ = ToolEffects(read_only=True, destructive=False, idempotent=True, open_world=False)
WRITE = ToolEffects(read_only=False, destructive=False, idempotent=True, open_world=False)
WIPE = ToolEffects(read_only=False, destructive=True, idempotent=True, open_world=False)

# (public name, effects, consent): a small world every generated policy talks about.
TOOLS: list[tuple[str, ToolEffects, Consent]] = [
    ("notes__read", READ, Consent.NONE),
    ("notes__search", READ, Consent.NONE),
    ("notes__write", WRITE, Consent.PER_CALL),
    ("notes__wipe", WIPE, Consent.PER_CALL),
    ("files__list", READ, Consent.NONE),
    ("files__delete", WIPE, Consent.NONE),
]
NAMES = [name for name, _, _ in TOOLS]


def runtime():  # type: ignore[no-untyped-def]
    by_plugin: dict[str, list[Any]] = {}
    for name, effects, consent in TOOLS:
        plugin, _, local = name.partition("__")
        by_plugin.setdefault(plugin, []).append(
            tool(plugin, local, effects=effects, consent=consent)
        )
    contributions = [contribution(plugin, *tools) for plugin, tools in by_plugin.items()]
    return compose_runtime(contributions, external_bindings(*contributions), server_version="0.1.0")


RUNTIME = runtime()


def policy_of(document: dict[str, Any]) -> Policy:
    configuration = parse_host_configuration(to_toml({"schema_version": 8, **document}).encode())
    return Policy(configuration.policy, RUNTIME)


def scope_policy(*grants: tuple[str, str]) -> Policy:
    """Default deny, and one rule per (scope, tool selector) allowing it."""
    rules = [{"principals": [f"scope:{scope}"], "allow": [tools]} for scope, tools in grants]
    return policy_of({"policy": {"default": "deny", "rules": rules}})


# -- the oracle: the rules as the documentation states them, written independently ------


def oracle_principal(selector: str, name: str, scopes: frozenset[str]) -> bool:
    if selector == "*":
        return True
    if selector in ("anonymous", "local"):
        return name == selector
    kind, _, value = selector.partition(":")
    if kind == "scope":
        if not name.startswith("oauth:"):
            return False
        return any(fnmatch.fnmatchcase(scope, value) for scope in scopes)
    return name.startswith(kind + ":") and fnmatch.fnmatchcase(name[len(kind) + 1 :], value)


def oracle_tool(selector: str, name: str) -> bool:
    effects, consent = next((e, c) for n, e, c in TOOLS if n == name)
    classes = {
        "@read_only": effects.read_only,
        "@mutating": not effects.read_only,
        "@destructive": effects.destructive,
        "@consent_required": consent is Consent.PER_CALL,
    }
    if selector in classes:
        return classes[selector]
    return fnmatch.fnmatchcase(name, selector)


def oracle(
    rules: list[dict[str, Any]], default: str, name: str, scopes: frozenset[str]
) -> set[str]:
    allowed = set()
    for tool_name in NAMES:
        speaking = [
            r for r in rules if any(oracle_principal(p, name, scopes) for p in r["principals"])
        ]
        if any(oracle_tool(s, tool_name) for r in speaking for s in r.get("deny", [])):
            continue
        allows = any(oracle_tool(s, tool_name) for r in speaking for s in r.get("allow", []))
        if allows or default == "allow":
            allowed.add(tool_name)
    return allowed | {"list_tools"}


SUBJECTS = ["alice", "bob", "al"]
SCOPES = ["memory.read", "memory.write", "admin", "offline_access"]
principal_selectors = st.sampled_from(
    ["*", "anonymous", "local", "operator:*", "oauth:*", "operator:al*"]
    + [f"operator:{s}" for s in SUBJECTS]
    + [f"oauth:{s}" for s in SUBJECTS]
    + [f"scope:{s}" for s in SCOPES]
    + ["scope:memory.*"]
)
tool_selectors = st.sampled_from(
    [
        *NAMES,
        *("notes__*", "files__*", "*", "*__read", "*e*"),
        *("@read_only", "@mutating", "@destructive", "@consent_required"),
    ]
)
rules_strategy = st.lists(
    st.fixed_dictionaries(
        {"principals": st.lists(principal_selectors, min_size=1, max_size=3, unique=True)},
        optional={
            "allow": st.lists(tool_selectors, min_size=1, max_size=3, unique=True),
            "deny": st.lists(tool_selectors, min_size=1, max_size=2, unique=True),
        },
    ).filter(lambda rule: "allow" in rule or "deny" in rule),
    max_size=6,
)
callers = st.one_of(
    st.just(("anonymous", frozenset[str]())),
    st.just(("local", frozenset[str]())),
    st.tuples(st.sampled_from(SUBJECTS).map(lambda s: f"operator:{s}"), st.just(frozenset[str]())),
    st.tuples(
        st.sampled_from(SUBJECTS).map(lambda s: f"oauth:{s}"),
        st.frozensets(st.sampled_from([*SCOPES, "memory.extra"]), max_size=3),
    ),
)


def _unique_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, unique = set(), []
    for rule in rules:
        key = tuple(frozenset(rule.get(k, [])) for k in ("principals", "allow", "deny"))
        if key not in seen:
            seen.add(key)
            unique.append(rule)
    return unique


@settings(max_examples=300, deadline=None)
@given(rules=rules_strategy, default=st.sampled_from(["allow", "deny"]), caller=callers)
def test_policy_matches_the_brute_force_oracle(
    rules: list[dict[str, Any]], default: str, caller: tuple[str, frozenset[str]]
) -> None:
    rules = _unique_rules(rules)
    policy = policy_of({"policy": {"default": default, "rules": rules}})
    name, scopes = caller
    view = policy.view(name, scopes)
    expected = oracle(rules, default, name, scopes)
    assert view.allowed == expected
    assert [t["name"] for t in view.listing] == [n for n in RUNTIME.registry.names if n in expected]
    assert view.list_tools_result["structuredContent"]["tools"] == [
        n for n in RUNTIME.registry.names if n in expected
    ]
    for tool_name, decision in view.decisions.items():
        assert decision.allowed == (tool_name in expected)
        if decision.via in ("allow", "deny"):
            rule = rules[decision.rule]  # type: ignore[index]
            assert decision.selector in rule[decision.via]


def _named_scopes(rules: list[dict[str, Any]]) -> set[str]:
    """The exact scopes rules that allow some tool name, which a client could ask for to
    gain access (not offline_access)."""
    named = {
        selector.removeprefix("scope:")
        for rule in rules
        if any(oracle_tool(s, tool) for s in rule.get("allow", []) for tool in NAMES)
        for selector in rule["principals"]
        if selector.startswith("scope:") and not selector.endswith("*")
    }
    return named - {"offline_access"}


@settings(max_examples=400, deadline=None)
@given(rules=rules_strategy, caller=callers, tool_name=st.sampled_from(NAMES))
def test_step_up_asks_for_one_least_sufficient_set_found_by_brute_force(
    rules: list[dict[str, Any]], caller: tuple[str, frozenset[str]], tool_name: str
) -> None:
    rules = _unique_rules(rules)
    document = {"policy": {"default": "deny", "rules": rules}}
    policy = policy_of(document)
    name, scopes = caller
    view = policy.view(name, scopes)
    asked = policy.step_up(view, tool_name)
    fresh = policy_of(document)  # the same answer from a policy that cached nothing yet
    assert fresh.step_up(fresh.view(name, scopes), tool_name) == asked
    assert "offline_access" not in asked | policy.step_up_scopes
    assert policy.step_up_scopes == _named_scopes(rules)
    denying = [
        selector
        for rule in rules
        if any(oracle_tool(s, tool) for s in rule.get("deny", []) for tool in NAMES)
        for selector in rule["principals"]
        if selector.startswith("scope:")
    ]
    assert policy.offered_scopes == {
        scope
        for scope in _named_scopes(rules)
        if not any(oracle_principal(s, "oauth:x", frozenset({scope})) for s in denying)
    }
    if view.allows(tool_name) or not name.startswith("oauth:"):
        assert asked == frozenset()
        return
    candidates = sorted(_named_scopes(rules) - scopes)
    sufficient = [
        set(extra)
        for size in range(1, len(candidates) + 1)
        for extra in itertools.combinations(candidates, size)
        if tool_name in oracle(rules, "deny", name, scopes | set(extra))
    ]
    if not sufficient:
        assert asked == frozenset()
        return
    fewest = min(len(extra) for extra in sufficient)
    extra = set(asked - scopes)
    assert len(extra) == fewest
    assert extra in sufficient
    # Of the token's scopes, exactly those policy names are kept (offline_access never).
    kept = {
        scope
        for scope in scopes - {"offline_access"}
        if any(
            oracle_principal(selector, "oauth:x", frozenset({scope}))
            for rule in rules
            for selector in rule["principals"]
            if selector.startswith("scope:")
        )
    }
    assert asked & scopes == kept
    # A new token carrying exactly what was asked (and what policy ignores) may call it.
    assert tool_name in oracle(rules, "deny", name, asked | (scopes - kept))
    # No other answer of that size grants fewer tools.
    granted = len(oracle(rules, "deny", name, scopes | extra))
    for other in sufficient:
        if len(other) == fewest:
            assert granted <= len(oracle(rules, "deny", name, scopes | other))


def test_step_up_asks_for_the_narrowest_scope_that_suffices() -> None:
    policy = scope_policy(
        ("memory.write", "@mutating"),
        ("admin", "*"),
        ("memory.read", "@read_only"),
        ("offline_access", "@read_only"),
    )
    view = policy.view("oauth:x", frozenset({"openid", "memory.read", "offline_access"}))
    assert policy.step_up(view, "notes__write") == {"memory.read", "memory.write"}
    assert policy.step_up_scopes == {"admin", "memory.read", "memory.write"}


def test_a_scope_that_only_takes_tools_away_is_not_offered() -> None:
    # A client that asks for every listed scope must not get a token that loses tools.
    policy = policy_of(
        {
            "policy": {
                "default": "deny",
                "rules": [
                    {"principals": ["scope:memory.write"], "allow": ["@mutating"]},
                    {"principals": ["scope:restricted"], "deny": ["@mutating"]},
                    {
                        "principals": ["scope:both"],
                        "allow": ["notes__read"],
                        "deny": ["notes__wipe"],
                    },
                ],
            }
        }
    )
    assert policy.step_up_scopes == {"memory.write", "both"}
    # Listed for every client to ask for: only what takes nothing away.
    assert policy.offered_scopes == {"memory.write"}
    view = policy.view("oauth:x", frozenset())
    assert policy.step_up(view, "notes__read") == {"both"}  # a challenge may still name it
    view = policy.view("oauth:x", frozenset({"restricted"}))
    assert policy.step_up(view, "notes__write") == frozenset()  # restricted denies it anyway


def test_no_policy_allows_everything_and_shares_one_view() -> None:
    policy = Policy(None, RUNTIME)
    first, second = policy.view("anonymous"), policy.view("oauth:x", frozenset({"a"}))
    assert first is second
    assert first.allowed == set(RUNTIME.registry.names)
    assert not policy.restricts
    assert policy.step_up(first, "notes__wipe") == frozenset()


def test_views_are_cached_per_principal_and_scopes() -> None:
    policy = policy_of({"policy": {"rules": [{"principals": ["*"], "allow": ["*"]}]}})
    assert policy.view("oauth:a", frozenset({"x"})) is policy.view("oauth:a", frozenset({"x"}))
    assert policy.view("oauth:a", frozenset({"x"})) is not policy.view("oauth:a")


def test_step_up_keeps_granted_scopes_that_policy_names() -> None:
    policy = scope_policy(("memory.read", "@read_only"), ("memory.write", "@mutating"))
    view = policy.view("oauth:alice", frozenset({"memory.read", "openid"}))
    assert view.allows("notes__read")
    assert not view.allows("notes__write")
    assert policy.step_up(view, "notes__write") == {"memory.read", "memory.write"}
    assert policy.step_up_scopes == {"memory.read", "memory.write"}
    assert policy.step_up(policy.view("operator:alice"), "notes__write") == frozenset()


def test_the_issue_example_policy() -> None:
    policy = policy_of(
        {
            "policy": {
                "default": "deny",
                "rules": [
                    {"principals": ["anonymous"], "allow": ["@read_only"]},
                    {
                        "principals": ["operator:alice", "oauth:*"],
                        "allow": ["notes__*", "files__list"],
                        "deny": ["notes__wipe"],
                    },
                    {"principals": ["scope:memory.write"], "allow": ["@mutating"]},
                ],
            }
        }
    )
    anonymous = policy.view("anonymous")
    assert anonymous.allowed == {"list_tools", "notes__read", "notes__search", "files__list"}
    alice = policy.view("operator:alice")
    assert alice.allowed == {
        "list_tools",
        "notes__read",
        "notes__search",
        "notes__write",
        "files__list",
    }
    assert alice.decisions["notes__wipe"].via == "deny"
    assert alice.decisions["notes__wipe"].rule == 1
    writer = policy.view("oauth:bob", frozenset({"memory.write"}))
    assert "files__delete" in writer.allowed
    assert "notes__wipe" not in writer.allowed  # deny always wins
    assert policy.view("operator:mallory").allowed == {"list_tools"}


# -- grammar and startup failures ---------------------------------------------------------


def failure(document: dict[str, Any]) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as caught:
        policy_of(document)
    return caught.value


@pytest.mark.parametrize(
    ("policy", "code", "where", "shown"),
    [
        ({"defualt": "deny"}, "policy_unknown_key", "policy.defualt", None),
        ({"default": "maybe"}, "policy_invalid", "policy.default", '"maybe"'),
        ({"rules": [{"principals": []}]}, "policy_empty_list", "policy.rules[0].principals", None),
        (
            {"rules": [{"principals": ["*"], "allow": []}]},
            "policy_empty_list",
            "policy.rules[0].allow",
            None,
        ),
        ({"rules": [{"principals": ["*"]}]}, "policy_empty_list", "policy.rules[0]", None),
        (
            {"rules": [{"principals": ["*"], "allow": ["x"], "note": "y"}]},
            "policy_unknown_key",
            "policy.rules[0].note",
            None,
        ),
        (
            {
                "rules": [
                    {"principals": ["*"], "allow": ["notes__*"]},
                    {"principals": ["root"], "allow": ["*"]},
                ]
            },
            "policy_invalid_principal",
            "policy.rules[1].principals[0]",
            '"root"',
        ),
        (
            {"rules": [{"principals": ["oauth:a*b"], "allow": ["*"]}]},
            "policy_invalid_principal",
            "policy.rules[0].principals[0]",
            '"oauth:a*b"',
        ),
        (
            {"rules": [{"principals": ["*"], "allow": ["@writes"]}]},
            "policy_invalid_tool",
            "policy.rules[0].allow[0]",
            '"@writes"',
        ),
        (
            {"rules": [{"principals": ["*"], "deny": ["notes__wipe", "notes wipe"]}]},
            "policy_invalid_tool",
            "policy.rules[0].deny[1]",
            '"notes wipe"',
        ),
        (
            {"rules": [{"principals": ["*"], "allow": ["notes__raed"]}]},
            "policy_unknown_tool",
            "policy.rules[0].allow[0]",
            '"notes__raed"',
        ),
        (
            {"rules": [{"principals": ["*"], "deny": ["list_tools"]}]},
            "policy_invalid_tool",
            "policy.rules[0].deny[0]",
            None,
        ),
        (
            {
                "rules": [
                    {"principals": ["*", "anonymous"], "allow": ["notes__read"]},
                    {"principals": ["anonymous", "*"], "allow": ["notes__read"]},
                ]
            },
            "policy_duplicate_rule",
            "policy.rules[1]",
            None,
        ),
        (
            {"rules": [{"principals": ["*", "*"], "allow": ["*"]}]},
            "policy_duplicate_selector",
            "policy.rules[0].principals[1]",
            None,
        ),
        # Two spellings of one subject (a backslash before `b` is itself).
        (
            {"rules": [{"principals": ["operator:a\\b", "operator:a\\\\b"], "allow": ["*"]}]},
            "policy_duplicate_selector",
            "policy.rules[0].principals[1]",
            '"operator:a\\\\\\\\b" names the principals "operator:a\\\\b" already names',
        ),
        (
            {
                "rules": [
                    {"principals": ["operator:a\\b"], "allow": ["notes__read"]},
                    {"principals": ["operator:a\\\\b"], "allow": ["notes__read"]},
                ]
            },
            "policy_duplicate_rule",
            "policy.rules[1]",
            None,
        ),
        ({"rules": {"principals": ["*"]}}, "policy_invalid", "policy.rules", None),
        # Over a bound: how far over is said, so the operator knows how much to cut.
        (
            {"rules": [{"principals": [f"operator:u{n}" for n in range(130)], "allow": ["*"]}]},
            "policy_too_large",
            "policy.rules[0].principals",
            "130 entries, at most 128 are allowed",
        ),
        (
            {"rules": [{"principals": [f"operator:u{n}"], "allow": ["*"]} for n in range(300)]},
            "policy_too_large",
            "policy.rules",
            "300 rules, at most 256 are allowed",
        ),
    ],
)
def test_bad_policies_name_the_rule_and_the_value(
    policy: dict[str, Any], code: str, where: str, shown: str | None
) -> None:
    error = failure({"policy": policy})
    assert error.code == code
    assert error.location.key == where
    if shown is not None:
        assert shown in str(error)


def test_policy_tables_need_schema_8() -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_host_configuration(b'schema_version = 1\n[policy]\ndefault = "allow"\n')
    assert caught.value.code == "invalid_schema"


def _code_of(parse: Any, text: str) -> str | None:
    try:
        parse(text)
    except ConfigurationError as exc:
        return exc.code
    return None


@given(st.text(max_size=40))
def test_any_principal_text_is_accepted_or_refused_cleanly(text: str) -> None:
    code = _code_of(parse_principal_selector, text)
    if code is None:
        selector = parse_principal_selector(text)
        assert selector.text == text
        assert text in ("*", "anonymous", "local") or text.split(":")[0] in (
            "operator",
            "oauth",
            "scope",
        )
    else:
        assert code == "policy_invalid_principal"


@given(st.sampled_from(["operator", "oauth"]), st.text(min_size=1, max_size=300))
def test_an_exact_subject_selector_no_subject_can_meet_is_refused(kind: str, subject: str) -> None:
    # A selector no authenticated subject can ever equal would silently match nobody.
    code = _code_of(parse_principal_selector, f"{kind}:{subject}")
    if "*" not in subject and not is_valid_subject(subject):
        assert code == "policy_invalid_principal"


# Every subject authentication accepts, spaces at either end and non-ASCII spaces too.
SUBJECTS = st.text(min_size=1, max_size=30).filter(is_valid_subject)


@given(st.sampled_from(["operator", "oauth"]), SUBJECTS)
def test_an_escaped_selector_names_exactly_its_subject(kind: str, subject: str) -> None:
    # Subjects may hold '*' and '\': written with '\*' and '\\', a selector names
    # such a subject and no other, where a bare '*' would have made it a prefix.
    escaped = subject.replace("\\", "\\\\").replace("*", "\\*")
    selector = parse_principal_selector(f"{kind}:{escaped}")
    assert (selector.value, selector.prefix) == (subject, False)
    allow = {"default": "deny", "rules": [{"principals": [selector.text], "allow": [NAMES[0]]}]}
    policy = policy_of({"policy": allow})
    assert policy.view(f"{kind}:{subject}").allows(NAMES[0])
    assert not policy.view(f"{kind}:{subject}x").allows(NAMES[0])


def test_a_star_inside_a_selector_must_be_escaped() -> None:
    assert parse_principal_selector("operator:bob\\*").value == "bob*"
    assert parse_principal_selector("operator:bob\\*").prefix is False
    assert parse_principal_selector("operator:bob\\**").prefix is True
    assert parse_principal_selector("operator:a\\b").value == "a\\b"  # a lone backslash
    for text in ("operator:b*b", "operator:**", "oauth:\\\\**"):
        assert _code_of(parse_principal_selector, text) == "policy_invalid_principal"


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ("operator:" + "a" * 256, True),
        ("operator:" + "a" * 257, False),
        ("oauth:" + "a" * 256 + "*", True),  # a prefix of the longest subjects
        ("oauth:" + "a" * 257 + "*", False),
        ("operator:e\u0301", False),  # decomposed: authentication refuses such subjects
        ("operator:\u00e9", True),
        ("oauth:e\u0301*", False),
        # Authentication accepts these subjects, so a rule can name each exactly.
        ("operator: sp", True),
        ("operator:alice ", True),
        ("operator:jane\u00a0doe", True),
        ("oauth:a\u3000b", True),
        ("operator: ", False),  # blank: no subject
        ("operator:a\x00b", False),
        ("oauth:a\u200bb", False),  # a format character
        ("operator:a\u0007*", False),  # no subject starts with a control character
        ("operator: *", True),
    ],
)
def test_subject_selectors_examples(text: str, accepted: bool) -> None:
    assert (_code_of(parse_principal_selector, text) is None) == accepted


@given(st.text(max_size=40))
def test_any_tool_selector_text_is_accepted_or_refused_cleanly(text: str) -> None:
    code = _code_of(parse_tool_selector, text)
    assert code in (None, "policy_invalid_tool")
    if code is None:
        assert parse_tool_selector(text).kind == (
            "effect" if text.startswith("@") else "glob" if "*" in text else "name"
        )


def test_a_tool_declared_but_switched_off_may_be_named() -> None:
    runtime = dataclasses.replace(RUNTIME, inactive_names=frozenset({"notes__purge"}))
    settings = parse_host_configuration(
        to_toml(
            {
                "schema_version": 8,
                "policy": {
                    "rules": [{"principals": ["*"], "allow": ["*"], "deny": ["notes__purge"]}]
                },
            }
        ).encode()
    ).policy
    view = Policy(settings, runtime).view("anonymous")
    assert "notes__read" in view.allowed
    assert "notes__purge" not in view.decisions  # it does not exist, so nothing to decide

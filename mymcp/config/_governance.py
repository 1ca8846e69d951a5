"""The governance tables of host configuration schema 8: `[policy]`, `[audit]`, `[approval]`.

This module owns their grammar and turns them into frozen values. What the selectors
mean against a composed runtime (which tools exist, what a principal may call) belongs
to `mymcp.governance`; here a selector is only checked for shape. Policy failures carry
`policy_*` codes and messages naming the key path (`policy.rules[1].allow[0]`) and the
offending value, because the operator reads them on their own terminal; the log line for
a failed load carries the code only.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from mymcp.config._grammar import (
    MAX_SCOPE_LENGTH,
    MAX_SUBJECT_BYTES,
    MAX_SUBJECT_CODE_POINTS,
    is_safe_absolute_path,
    is_scope_token,
    is_valid_subject,
)
from mymcp.errors import ConfigurationError, found, shown

__all__ = [
    "DEFAULT_APPROVAL_TTL_SECONDS",
    "DEFAULT_AUDIT_MAX_SEGMENTS",
    "DEFAULT_AUDIT_SEGMENT_BYTES",
    "EFFECT_CLASSES",
    "ApprovalSettings",
    "AuditSettings",
    "PolicyRule",
    "PolicySettings",
    "PrincipalSelector",
    "ToolSelector",
    "approval_settings",
    "audit_settings",
    "parse_principal_selector",
    "parse_tool_selector",
    "policy_settings",
]

DEFAULT_AUDIT_SEGMENT_BYTES: Final = 8 * 1024 * 1024
DEFAULT_AUDIT_MAX_SEGMENTS: Final = 16
DEFAULT_APPROVAL_TTL_SECONDS: Final = 300
MAX_POLICY_RULES: Final = 256
MAX_SELECTORS_PER_LIST: Final = 128

EFFECT_CLASSES: Final = frozenset({"read_only", "mutating", "destructive", "consent_required"})
"""Tool classes computed from declared effects, written `@<class>` in tool selectors."""

PrincipalKind = Literal["any", "anonymous", "local", "operator", "oauth", "scope"]
_PREFIXED: Final = frozenset({"operator", "oauth", "scope"})
_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_TOOL_GLOB: Final = re.compile(r"[A-Za-z0-9_.*-]{1,128}")


@dataclass(frozen=True, slots=True)
class PrincipalSelector:
    """Who a rule speaks for: `*`, `anonymous`, `local`, `operator:<subject>`,
    `oauth:<sub>` or `scope:<scope>`, where a trailing `*` makes the value a prefix."""

    text: str
    kind: PrincipalKind
    value: str = ""
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class ToolSelector:
    """Which tools a rule speaks of: a public name, a `*` glob, or an `@<effect class>`."""

    text: str
    kind: Literal["name", "glob", "effect"]
    value: str


@dataclass(frozen=True, slots=True)
class PolicyRule:
    index: int
    principals: tuple[PrincipalSelector, ...]
    allow: tuple[ToolSelector, ...]
    deny: tuple[ToolSelector, ...]


@dataclass(frozen=True, slots=True)
class PolicySettings:
    """`[policy]`: what a principal gets when no rule speaks, and the rules in order."""

    default: Literal["allow", "deny"] = "deny"
    rules: tuple[PolicyRule, ...] = ()


@dataclass(frozen=True, slots=True)
class AuditSettings:
    """`[audit]`; `directory` None means the XDG state default, resolved at startup."""

    enabled: bool = True
    directory: Path | None = None
    max_segment_bytes: int = DEFAULT_AUDIT_SEGMENT_BYTES
    max_segments: int = DEFAULT_AUDIT_MAX_SEGMENTS


@dataclass(frozen=True, slots=True)
class ApprovalSettings:
    """`[approval]`: which calls a person must approve in the console, and for how long."""

    tools: tuple[ToolSelector, ...] = ()
    ttl_seconds: int = DEFAULT_APPROVAL_TTL_SECONDS


def parse_principal_selector(text: object, where: str = "principal") -> PrincipalSelector:
    """Check one principal selector's shape; raises a `policy_invalid_principal` error."""
    if not isinstance(text, str):
        raise ConfigurationError.at(
            "policy_invalid_principal", where, f"expected a string, got {shown(text)}"
        )
    if text == "*":
        return PrincipalSelector(text, "any")
    if text in ("anonymous", "local"):
        return PrincipalSelector(text, "anonymous" if text == "anonymous" else "local")
    kind, colon, value = text.partition(":")
    if not colon or kind not in _PREFIXED:
        raise ConfigurationError.at(
            "policy_invalid_principal",
            where,
            f"{shown(text)} is not '*', 'anonymous', 'local', 'operator:<subject>', "
            "'oauth:<subject>' or 'scope:<scope>'",
        )
    read = _read_selector_value(value)
    stem, prefix = read if read is not None else ("", False)
    if read is None or (not prefix and not stem):
        raise ConfigurationError.at(
            "policy_invalid_principal",
            where,
            f"{shown(text)}: the value after '{kind}:' must not be empty, and may have '*' "
            "only as a trailing glob (write a '*' that is part of the value as '\\*')",
        )
    # A subject selector takes exactly the subjects authentication accepts (spaces at
    # either end and non-ASCII spaces included): a rule must be able to name each one.
    if kind != "scope" and not _may_name_a_subject(stem, prefix):
        raise ConfigurationError.at(
            "policy_invalid_principal",
            where,
            f"{shown(text)} can never match: a subject is at most {MAX_SUBJECT_CODE_POINTS} "
            "characters, not blank, without control, format, private-use or unassigned "
            "characters, in Unicode's composed form (NFC)",
        )
    # Authentication drops every scope that is not a scope token, so such a selector matches
    # no token, and the step-up 403 asking for it would send a client round in a loop. A
    # prefix starts some kept scope only if it is itself one.
    if kind == "scope" and stem and not is_scope_token(stem):
        raise ConfigurationError.at(
            "policy_invalid_principal",
            where,
            f"{shown(text)} is not an OAuth scope token: at most {MAX_SCOPE_LENGTH} "
            "printable ASCII characters other than space, '\"' and '\\'",
        )
    return PrincipalSelector(text, kind, stem, prefix)  # type: ignore[arg-type]


def _read_selector_value(value: str) -> tuple[str, bool] | None:
    """The value a selector names and whether a trailing `*` makes it a prefix, or None
    for a `*` anywhere else. Subjects and scopes may hold `*` themselves, so `\\*` names
    one and `\\\\` a backslash before one; any other backslash is itself."""
    chars: list[str] = []
    index, end = 0, len(value)
    while index < end:
        char = value[index]
        if char == "\\" and index + 1 < end and value[index + 1] in "*\\":
            chars.append(value[index + 1])
            index += 2
            continue
        if char == "*":
            if index != end - 1:
                return None
            return "".join(chars), True
        chars.append(char)
        index += 1
    return "".join(chars), False


def _may_name_a_subject(stem: str, prefix: bool) -> bool:
    """Whether some subject authentication accepts is `stem` (or, as a prefix, starts
    with it): a selector no subject can meet would silently allow or deny nobody."""
    if not prefix:
        return is_valid_subject(stem)
    return (
        not any(unicodedata.category(char).startswith("C") for char in stem)
        and len(stem) <= MAX_SUBJECT_CODE_POINTS
        and len(stem.encode("utf-8", "surrogatepass")) <= MAX_SUBJECT_BYTES
        and unicodedata.is_normalized("NFC", stem)
    )


def parse_tool_selector(text: object, where: str = "tool") -> ToolSelector:
    """Check one tool selector's shape; raises a `policy_invalid_tool` error."""
    if not isinstance(text, str):
        raise ConfigurationError.at(
            "policy_invalid_tool", where, f"expected a string, got {shown(text)}"
        )
    if text.startswith("@"):
        if text[1:] not in EFFECT_CLASSES:
            classes = ", ".join(f"@{name}" for name in sorted(EFFECT_CLASSES))
            raise ConfigurationError.at(
                "policy_invalid_tool", where, f"{shown(text)} is not one of {classes}"
            )
        return ToolSelector(text, "effect", text[1:])
    if "*" in text and _TOOL_GLOB.fullmatch(text):
        return ToolSelector(text, "glob", text)
    if _TOOL_NAME.fullmatch(text):
        return ToolSelector(text, "name", text)
    raise ConfigurationError.at(
        "policy_invalid_tool",
        where,
        f"{shown(text)} is not a tool name, a '*' glob of [A-Za-z0-9_.-] or an @effect class",
    )


def _string_list(table: dict[str, Any], key: str, where: str) -> list[object] | None:
    if key not in table:
        return None
    value = table[key]
    if not isinstance(value, list):
        raise ConfigurationError.at(
            "policy_invalid", f"{where}.{key}", f"expected an array, got {shown(value)}"
        )
    if not value:
        raise ConfigurationError.at("policy_empty_list", f"{where}.{key}", "the list is empty")
    if len(value) > MAX_SELECTORS_PER_LIST:
        raise ConfigurationError.at(
            "policy_too_large",
            f"{where}.{key}",
            f"{len(value)} entries, at most {MAX_SELECTORS_PER_LIST} are allowed",
        )
    seen: set[object] = set()
    for position, item in enumerate(value):
        if isinstance(item, str) and item in seen:
            raise ConfigurationError.at(
                "policy_duplicate_selector", f"{where}.{key}[{position}]", f"{shown(item)} repeats"
            )
        seen.add(item if isinstance(item, str) else position)
    return value


def _tool_list(table: dict[str, Any], key: str, where: str) -> tuple[ToolSelector, ...]:
    items = _string_list(table, key, where)
    if items is None:
        return ()
    return tuple(
        parse_tool_selector(item, f"{where}.{key}[{position}]")
        for position, item in enumerate(items)
    )


def _rule(index: int, entry: object) -> PolicyRule:
    where = f"policy.rules[{index}]"
    if not isinstance(entry, dict):
        raise ConfigurationError.at(
            "policy_invalid", where, "each rule must be a table ([[policy.rules]])"
        )
    unknown = sorted(set(entry) - {"principals", "allow", "deny"})
    if unknown:
        raise ConfigurationError.at(
            "policy_unknown_key",
            f"{where}.{unknown[0]}",
            "a rule has only 'principals', 'allow' and 'deny'",
        )
    principals = _string_list(entry, "principals", where)
    if principals is None:
        raise ConfigurationError.at(
            "policy_invalid", f"{where}.principals", "every rule needs principals"
        )
    if "allow" not in entry and "deny" not in entry:
        raise ConfigurationError.at(
            "policy_empty_list", where, "a rule needs 'allow', 'deny' or both"
        )
    return PolicyRule(
        index=index,
        principals=_principal_list(principals, where),
        allow=_tool_list(entry, "allow", where),
        deny=_tool_list(entry, "deny", where),
    )


def _principal_list(items: list[Any], where: str) -> tuple[PrincipalSelector, ...]:
    """The rule's principal selectors; two spellings of one selector (`a\\b` and `a\\\\b`
    name the same subject) repeat it as surely as the same text twice."""
    selectors: dict[tuple[str, str, bool], str] = {}
    parsed = []
    for position, item in enumerate(items):
        selector = parse_principal_selector(item, f"{where}.principals[{position}]")
        key = _selector_key(selector)
        if key in selectors:
            raise ConfigurationError.at(
                "policy_duplicate_selector",
                f"{where}.principals[{position}]",
                f"{shown(item)} names the principals {shown(selectors[key])} already names",
            )
        selectors[key] = item
        parsed.append(selector)
    return tuple(parsed)


def _selector_key(selector: PrincipalSelector) -> tuple[str, str, bool]:
    return (selector.kind, selector.value, selector.prefix)


def _rule_key(rule: PolicyRule) -> tuple[frozenset[object], ...]:
    return (
        frozenset(_selector_key(s) for s in rule.principals),
        frozenset(s.text for s in rule.allow),
        frozenset(s.text for s in rule.deny),
    )


def policy_settings(value: object) -> PolicySettings:
    """Validate a `[policy]` table."""
    if not isinstance(value, dict):
        raise ConfigurationError.at("policy_invalid", "policy", "[policy] must be a table")
    unknown = sorted(set(value) - {"default", "rules"})
    if unknown:
        raise ConfigurationError.at(
            "policy_unknown_key", f"policy.{unknown[0]}", "[policy] has only 'default' and 'rules'"
        )
    default = value.get("default", "deny")
    if default not in ("allow", "deny"):
        raise ConfigurationError.at(
            "policy_invalid", "policy.default", f'expected "allow" or "deny", got {shown(default)}'
        )
    entries = value.get("rules", [])
    if not isinstance(entries, list):
        raise ConfigurationError.at(
            "policy_invalid", "policy.rules", "rules must be an array of tables"
        )
    if len(entries) > MAX_POLICY_RULES:
        raise ConfigurationError.at(
            "policy_too_large",
            "policy.rules",
            f"{len(entries)} rules, at most {MAX_POLICY_RULES} are allowed",
        )
    rules = tuple(_rule(index, entry) for index, entry in enumerate(entries))
    seen: dict[tuple[frozenset[object], ...], int] = {}
    for rule in rules:
        earlier = seen.setdefault(_rule_key(rule), rule.index)
        if earlier != rule.index:
            raise ConfigurationError.at(
                "policy_duplicate_rule",
                f"policy.rules[{rule.index}]",
                f"it repeats policy.rules[{earlier}]",
            )
    return PolicySettings(default=default, rules=rules)


def _table(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigurationError.at(
            "invalid_schema", where, f"expected a table, got {found(value)}"
        )
    return value


def _unknown(table: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigurationError.at(
            "invalid_schema",
            f"{where}.{unknown[0]}",
            f"unknown key; [{where}] takes {', '.join(sorted(allowed))}",
        )


def _bounded_int(table: dict[str, Any], key: str, low: int, high: int, default: int) -> int:
    value = table.get(key, default)
    if type(value) is not int or not low <= value <= high:
        where = f"{_TABLE_OF[key]}.{key}"
        detail = f"expected an integer from {low} to {high}, got {found(value)}"
        raise ConfigurationError.at("invalid_schema", where, detail) from None
    return value


_TABLE_OF: Final = {
    "max_segment_bytes": "audit",
    "max_segments": "audit",
    "ttl_seconds": "approval",
}


def audit_settings(value: object) -> AuditSettings:
    """Validate an `[audit]` table (every key optional)."""
    table = _table(value, "audit")
    _unknown(table, {"enabled", "directory", "max_segment_bytes", "max_segments"}, "audit")
    enabled = table.get("enabled", True)
    if type(enabled) is not bool:
        detail = f"expected true or false, got {found(enabled)}"
        raise ConfigurationError.at("invalid_schema", "audit.enabled", detail)
    directory: Path | None = None
    if "directory" in table:
        if not is_safe_absolute_path(table["directory"]):
            raise ConfigurationError.at(
                "invalid_schema",
                "audit.directory",
                "expected an absolute path without '~', '$', '%', '.' or '..', "
                f"got {found(table['directory'])}",
            )
        directory = Path(table["directory"])
    return AuditSettings(
        enabled=enabled,
        directory=directory,
        max_segment_bytes=_bounded_int(
            table, "max_segment_bytes", 65536, 1 << 30, DEFAULT_AUDIT_SEGMENT_BYTES
        ),
        max_segments=_bounded_int(table, "max_segments", 2, 10000, DEFAULT_AUDIT_MAX_SEGMENTS),
    )


def approval_settings(value: object) -> ApprovalSettings:
    """Validate an `[approval]` table (every key optional)."""
    table = _table(value, "approval")
    _unknown(table, {"tools", "ttl_seconds"}, "approval")
    tools: tuple[ToolSelector, ...] = ()
    raw = table.get("tools", [])
    if not isinstance(raw, list):
        detail = f"expected an array of tool selectors, got {found(raw)}"
        raise ConfigurationError.at("invalid_schema", "approval.tools", detail)
    if raw:
        tools = _tool_list(table, "tools", "approval")
    return ApprovalSettings(
        tools=tools,
        ttl_seconds=_bounded_int(table, "ttl_seconds", 10, 3600, DEFAULT_APPROVAL_TTL_SECONDS),
    )

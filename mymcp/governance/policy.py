"""Per-principal tool policy: which tools a caller may discover and call, and why.

`Policy` compiles the `[policy]` rules against the composed runtime once at startup
(every selector resolved to a set of public tool names) and answers with a `PolicyView`
per caller. Discovery (`tools/list`, `list_tools`) and dispatch (`tools/call`) both read
the same view, so what a caller sees is exactly what it may call.

Evaluation, for one caller and one tool: the rules whose `principals` match the caller
speak; if any of them denies the tool it is denied (deny always wins); otherwise if any
allows it, it is allowed; otherwise `default` decides. `list_tools` is always allowed.

Views are cached per (principal name, scopes) for the runtime's life, in one bounded
least-recently-used map owned by `Policy`; nothing ever invalidates an entry because
neither the rules nor the runtime change after startup.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

from mymcp.config import (
    PolicyRule,
    PolicySettings,
    PrincipalSelector,
    ToolSelector,
)
from mymcp.errors import ConfigurationError, shown
from mymcp.plugin import Consent, structured_result
from mymcp.runtime import HOST_ORIGIN, BoundTool, HostRuntime, list_tools_payload

__all__ = [
    "Decision",
    "Policy",
    "PolicyView",
    "effect_classes",
    "principal_matches",
    "select_tools",
]

MAX_CACHED_VIEWS: Final = 4096
OFFLINE_ACCESS: Final = "offline_access"


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether one tool is allowed, and what decided it (for `policy explain` and audit)."""

    allowed: bool
    via: Literal["allow", "deny", "default", "unrestricted", "host"]
    rule: int | None = None
    selector: str | None = None


_UNRESTRICTED: Final = Decision(True, "unrestricted")
_HOST_TOOL: Final = Decision(True, "host")


def effect_classes(tool: BoundTool) -> frozenset[str]:
    """The `@class` names a tool belongs to, computed from its declared effects."""
    classes = {"read_only" if tool.effects.read_only else "mutating"}
    if tool.effects.destructive:
        classes.add("destructive")
    if tool.consent is Consent.PER_CALL:
        classes.add("consent_required")
    return frozenset(classes)


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def select_tools(
    selector: ToolSelector,
    tools: Sequence[BoundTool],
    where: str,
    inactive: frozenset[str] = frozenset(),
) -> frozenset[str]:
    """The public names `selector` names among `tools` (host tools never included).

    A plain name must exist: a typo would otherwise silently allow or deny nothing. A
    tool its plugin declares but did not activate (a gate is off) counts as existing, so
    turning a gate off never breaks a policy that mentions the tool.
    """
    if selector.kind == "name":
        if selector.value == "list_tools":
            raise ConfigurationError.at(
                "policy_invalid_tool", where, "list_tools is always allowed; policy cannot name it"
            )
        if selector.value in inactive:
            return frozenset()
        if not any(tool.name == selector.value for tool in tools):
            # Every name a rule may use: the tools served, and those a gate keeps off.
            known = _listed([tool.name for tool in tools]) or "none"
            if inactive:
                known += f"; turned off by a gate: {_listed(sorted(inactive))}"
            raise ConfigurationError.at(
                "policy_unknown_tool",
                where,
                f"no tool is named {shown(selector.value)} (the tools are: {known})",
            )
        return frozenset({selector.value})
    if selector.kind == "glob":
        pattern = _glob(selector.value)
        return frozenset(tool.name for tool in tools if pattern.fullmatch(tool.name))
    return frozenset(tool.name for tool in tools if selector.value in effect_classes(tool))


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names[:24]) + (", ..." if len(names) > 24 else "")


def principal_matches(selector: PrincipalSelector, name: str, scopes: frozenset[str]) -> bool:
    """Whether a caller named `name` (`anonymous`, `operator:x`, `oauth:x`, `local`) with
    OAuth `scopes` is one of the callers `selector` speaks for."""
    kind = selector.kind
    if kind == "any":
        return True
    if kind in ("anonymous", "local"):
        return name == kind
    if kind == "scope":
        if not name.startswith("oauth:"):
            return False
        if selector.prefix:
            return any(scope.startswith(selector.value) for scope in scopes)
        return selector.value in scopes
    prefix = f"{kind}:"
    if not name.startswith(prefix):
        return False
    subject = name[len(prefix) :]
    return subject.startswith(selector.value) if selector.prefix else subject == selector.value


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    rule: PolicyRule
    allow: tuple[tuple[str, frozenset[str]], ...]  # (selector text, names it matches)
    deny: tuple[tuple[str, frozenset[str]], ...]


@dataclass(frozen=True, slots=True)
class PolicyView:
    """What one caller may do: the allowed names, a decision per tool, and the listing."""

    principal: str
    scopes: frozenset[str]
    allowed: frozenset[str]
    decisions: Mapping[str, Decision]
    listing: tuple[dict[str, Any], ...]
    list_tools_result: Mapping[str, Any]

    def allows(self, name: str) -> bool:
        return name in self.allowed


class Policy:
    """The compiled `[policy]` of one runtime (or no policy at all: everything allowed)."""

    def __init__(self, settings: PolicySettings | None, runtime: HostRuntime) -> None:
        self._settings = settings
        self._runtime = runtime
        self._tools = tuple(tool for tool in runtime.registry if tool.origin != HOST_ORIGIN)
        self._rules = tuple(self._compile(rule) for rule in (settings.rules if settings else ()))
        self._views: OrderedDict[tuple[str, frozenset[str]], PolicyView] = OrderedDict()
        self._unrestricted: PolicyView | None = None

    def _compile(self, rule: PolicyRule) -> _CompiledRule:
        where = f"policy.rules[{rule.index}]"

        def resolve(
            selectors: tuple[ToolSelector, ...], key: str
        ) -> tuple[tuple[str, frozenset[str]], ...]:
            return tuple(
                (
                    s.text,
                    select_tools(
                        s, self._tools, f"{where}.{key}[{position}]", self._runtime.inactive_names
                    ),
                )
                for position, s in enumerate(selectors)
            )

        return _CompiledRule(rule, resolve(rule.allow, "allow"), resolve(rule.deny, "deny"))

    @property
    def restricts(self) -> bool:
        """True when a `[policy]` exists, so what a caller sees depends on who it is."""
        return self._settings is not None

    @property
    def step_up_scopes(self) -> frozenset[str]:
        """Every exact scope a `scope:` rule that allows some tool names: what an OAuth
        client may ask for to gain access.

        A scope whose rules only deny is left out: it unlocks nothing. Never
        `offline_access` either: it asks for a refresh
        token, not for access to a tool, and belongs in no challenge and no
        `scopes_supported`.
        """
        return frozenset(
            selector.value
            for compiled in self._rules
            if any(names for _, names in compiled.allow)
            for selector in compiled.rule.principals
            if selector.kind == "scope" and not selector.prefix
        ) - {OFFLINE_ACCESS}

    @property
    def offered_scopes(self) -> frozenset[str]:
        """The scopes `scopes_supported` lists: those `step_up_scopes` holds that no rule
        denying a tool names. A client that asks for every scope listed (as the SDKs do
        when no challenge names one) then never gets a token that loses a tool; a scope
        that grants some tools and takes others is still named in a challenge, for the
        one call it unlocks."""
        denying = [
            selector
            for compiled in self._rules
            if any(names for _, names in compiled.deny)
            for selector in compiled.rule.principals
            if selector.kind == "scope"
        ]
        return frozenset(
            scope
            for scope in self.step_up_scopes
            if not any(principal_matches(s, "oauth:", frozenset({scope})) for s in denying)
        )

    def view(self, name: str, scopes: frozenset[str] = frozenset()) -> PolicyView:
        """The (cached) view of the caller `name` carrying OAuth `scopes`."""
        if self._settings is None:
            if self._unrestricted is None:
                self._unrestricted = self._build("*", frozenset(), self._decide_all(None))
            return self._unrestricted
        key = (name, scopes)
        cached = self._views.get(key)
        if cached is not None:
            self._views.move_to_end(key)
            return cached
        view = self._build(name, scopes, self._decide_all((name, scopes)))
        self._views[key] = view
        if len(self._views) > MAX_CACHED_VIEWS:
            self._views.popitem(last=False)
        return view

    def _decide_all(self, caller: tuple[str, frozenset[str]] | None) -> dict[str, Decision]:
        decisions: dict[str, Decision] = {}
        settings = self._settings
        if caller is None or settings is None:
            return {tool.name: _UNRESTRICTED for tool in self._tools}
        name, scopes = caller
        speaking = [
            compiled
            for compiled in self._rules
            if any(principal_matches(s, name, scopes) for s in compiled.rule.principals)
        ]
        for tool in self._tools:
            decisions[tool.name] = self._decide(tool.name, speaking, settings.default)
        return decisions

    @staticmethod
    def _decide(name: str, speaking: Iterable[_CompiledRule], default: str) -> Decision:
        allowed_by: Decision | None = None
        for compiled in speaking:
            for text, names in compiled.deny:
                if name in names:
                    return Decision(False, "deny", compiled.rule.index, text)
            if allowed_by is None:
                for text, names in compiled.allow:
                    if name in names:
                        allowed_by = Decision(True, "allow", compiled.rule.index, text)
                        break
        if allowed_by is not None:
            return allowed_by
        return Decision(default == "allow", "default")

    def _build(
        self, name: str, scopes: frozenset[str], decisions: dict[str, Decision]
    ) -> PolicyView:
        allowed_tools = [
            tool
            for tool in self._runtime.registry
            if tool.origin == HOST_ORIGIN or decisions[tool.name].allowed
        ]
        names = tuple(tool.name for tool in allowed_tools)
        for tool in self._runtime.registry:
            if tool.origin == HOST_ORIGIN:
                decisions[tool.name] = _HOST_TOOL
        payload = list_tools_payload(self._runtime.server_version, names)
        return PolicyView(
            principal=name,
            scopes=scopes,
            allowed=frozenset(names),
            decisions=MappingProxyType(decisions),
            listing=tuple(tool.published() for tool in allowed_tools),
            list_tools_result=MappingProxyType(structured_result(payload)),
        )

    def step_up(self, view: PolicyView, tool: str) -> frozenset[str]:
        """The scopes a token needs to call `tool`, or empty when no scope would allow it.

        A rule speaks for any one of its principals, so whenever some set of added
        scopes would allow the call, one added scope does (a scope that makes a denying
        rule speak can only hurt: deny wins). Of the scopes that allow it alone, the one
        granting least is asked for: the fewest tools with the caller's scopes, then the
        fewest with that scope alone, then the first by name. So a client never asks for
        more than the call needs, and always for the same. The caller's own scopes that
        policy names are kept in the answer: a client asking for exactly this set loses
        nothing it had.
        """
        if not view.principal.startswith("oauth:") or tool not in view.decisions:
            return frozenset()
        if view.allows(tool):
            return frozenset()
        unlocking = []
        for scope in sorted(self.step_up_scopes - view.scopes):
            widened = self.view(view.principal, view.scopes | {scope})
            if widened.allows(tool):
                alone = self.view(view.principal, frozenset({scope}))
                unlocking.append((len(widened.allowed), len(alone.allowed), scope))
        if not unlocking:
            return frozenset()
        *_, chosen = min(unlocking)
        kept = {
            scope for scope in view.scopes if scope != OFFLINE_ACCESS and self._names_scope(scope)
        }
        return frozenset({*kept, chosen})

    def _names_scope(self, scope: str) -> bool:
        return any(
            principal_matches(selector, "oauth:", frozenset({scope}))
            for compiled in self._rules
            for selector in compiled.rule.principals
            if selector.kind == "scope"
        )

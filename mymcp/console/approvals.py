"""What a person sees before approving a call: the call exactly, and what it would change.

Every argument is shown as pretty-printed JSON of the exact value the tool would get.
Characters that render invisibly or reorder text (controls, format characters such as
right-to-left overrides, line and paragraph separators) are shown as `\\uXXXX`, so that
what is shown cannot differ from what runs. For a memory change the record it targets is
inspected; for `memory_revise` the stored and the proposed text stand side by side.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from mymcp._escaping import escape_invisible
from mymcp.console.memory import LIFECYCLE_ACTIONS, MemoryBrowser, Outcome
from mymcp.governance import Approval, ApprovalState, rfc3339

__all__ = ["ApprovalDetail", "ComparedField", "describe", "pending_summary", "visible"]

_REVISE: Final = "memory_revise"
_TARGETING: Final = frozenset({*LIFECYCLE_ACTIONS.values(), _REVISE})

STATE_TEXT: Final[Mapping[ApprovalState, str]] = {
    ApprovalState.PENDING: "Waiting for your decision.",
    ApprovalState.GRANTED: (
        "Approved. The client may now repeat this identical call; it runs once."
    ),
    ApprovalState.DENIED: (
        "Denied. When the client repeats this call it is told that you denied it."
    ),
    ApprovalState.SPENT: "Approved and used: the call ran once.",
    ApprovalState.EXPIRED: (
        "Expired: nobody decided in time, the approval was not used, the caller's session "
        "ended (so the call can no longer come back), or the caller's newer requests (only "
        "so many wait at once) pushed it out."
    ),
}


def visible(text: str) -> str:
    """`text` as a page shows it: invisible characters escaped, its lines and tabs kept."""
    return escape_invisible(text, keep_layout=True)


def pretty_arguments(arguments: Mapping[str, Any]) -> str:
    return visible(json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True))


@dataclass(frozen=True, slots=True)
class ComparedField:
    """One field of a revision: what is stored, what is proposed (both as shown), and
    whether the values themselves differ."""

    name: str
    stored: str
    proposed: str
    changed: bool
    spacing_only: bool = False
    """Changed, but only in spaces, tabs or line ends, which the cells cannot show."""


@dataclass(frozen=True, slots=True)
class ApprovalDetail:
    approval: Approval
    arguments: str
    state_text: str
    times: tuple[tuple[str, str], ...]
    """What happened when, labelled as fits the state: `("Expires at", …)` and so on."""
    target: Outcome | None = None
    comparison: tuple[ComparedField, ...] = ()
    revision_note: str | None = None
    declined_note: str | None = None
    """Set while the call can still be decided and its client said its user declined."""
    principal_note: str | None = None
    """Set when the principal's name has characters beyond ASCII, naming them."""


def _shown(value: object) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, list):
        # As a JSON list, so that ["a, b"] and ["a", "b"] cannot look alike.
        return visible(json.dumps(value, ensure_ascii=False)) if value else "(no tags)"
    return visible(str(value))


def _times(approval: Approval) -> tuple[tuple[str, str], ...]:
    state = approval.state
    times = [("Requested at", approval.created_at)]
    if approval.decided_at is not None:
        decision = "Denied at" if state is ApprovalState.DENIED else "Approved at"
        times.append((decision, approval.decided_at))
    if state is ApprovalState.PENDING:
        times.append(("Expires at", approval.expires_at))
    elif state is ApprovalState.GRANTED:
        times.append(("Valid until", approval.expires_at))
    elif approval.ended_at is not None:  # spent or expired
        ended = "Used at" if state is ApprovalState.SPENT else "Expired at"
        times.append((ended, approval.ended_at))
    return tuple((label, rfc3339(moment)) for label, moment in times)


# How many characters the note on a principal beyond ASCII names, at most.
_NAMED_CHARACTERS = 8


def _principal_note(principal: str) -> str | None:
    """For a principal with characters beyond ASCII, which ones: `alice` spelled with a
    Cyrillic a (U+0430) looks just like `alice` on the page, and the person deciding must
    be able to tell."""
    beyond = list(dict.fromkeys(char for char in principal if not char.isascii()))
    if not beyond:
        return None
    named = ", ".join(
        f"U+{ord(char):04X} {unicodedata.name(char, '')}".rstrip()
        for char in beyond[:_NAMED_CHARACTERS]
    )
    more = f" and {len(beyond) - _NAMED_CHARACTERS} more" if len(beyond) > _NAMED_CHARACTERS else ""
    return (
        f"This principal's name has characters beyond ASCII, which can look like others: "
        f"{named}{more}. Make sure it is who you expect."
    )


def _declined_note(approval: Approval) -> str | None:
    declined = approval.client_declined_at
    if declined is None or approval.state is not ApprovalState.PENDING:
        return None
    return (
        f"The client reported at {rfc3339(declined)} that its user declined to open this "
        "page: they may not want this call. Approve only if you know they do."
    )


def _label(container: object) -> object:
    return container.get("label") if isinstance(container, Mapping) else None


def _comparison(
    stored: Mapping[str, Any], proposed: Mapping[str, Any]
) -> tuple[ComparedField, ...]:
    rows = [
        ("Namespace label", _label(stored.get("namespace")), proposed.get("namespace_label")),
        ("Collection label", _label(stored.get("collection")), proposed.get("collection_label")),
        ("Title", stored.get("title"), proposed.get("title")),
        ("Content", stored.get("content"), proposed.get("content")),
        ("Tags", stored.get("tags"), proposed.get("tags")),
    ]
    return tuple(
        ComparedField(name, _shown(old), _shown(new), old != new, _spacing_only(old, new))
        for name, old, new in rows
    )


# What the cells cannot show: a space, a tab or a line end. (`str.split` would also take
# separators and other characters the cells show escaped, which are a visible change.)
_SPACING = re.compile(r"[ \t\r\n]+")


def _spacing_only(old: object, new: object) -> bool:
    if not (isinstance(old, str) and isinstance(new, str)) or old == new:
        return False
    words: list[str] = _SPACING.split(old.strip(" \t\r\n"))
    return words == _SPACING.split(new.strip(" \t\r\n"))


def _revision_note(stored: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    lifecycle = stored.get("lifecycle")
    current = lifecycle.get("revision") if isinstance(lifecycle, Mapping) else None
    expected = arguments.get("expected_revision")
    if current is None or expected == current:
        return None
    return (
        f"The call expects revision {expected}, but the record is at revision {current}: "
        "if approved, it will fail with revision_conflict and change nothing."
    )


async def describe(approval: Approval, memory: MemoryBrowser) -> ApprovalDetail:
    """Everything the approval page shows; inspects the targeted record when there is one."""
    arguments = approval.arguments
    detail = ApprovalDetail(
        approval=approval,
        arguments=pretty_arguments(arguments),
        state_text=STATE_TEXT[approval.state],
        times=_times(approval),
        declined_note=_declined_note(approval),
        principal_note=_principal_note(approval.principal),
    )
    tool = memory.memory_tool(approval.tool)
    if tool not in _TARGETING or "reference" not in arguments:
        return detail
    target = await memory.inspect(arguments["reference"])
    record = target.payload.get("memory") if target.ok else None
    if not isinstance(record, Mapping):
        return replace(detail, target=target)
    comparison = _comparison(record, arguments) if tool == _REVISE else ()
    return replace(
        detail,
        target=target,
        comparison=comparison,
        revision_note=_revision_note(record, arguments),
    )


def pending_summary(approvals: list[Approval]) -> list[dict[str, str | bool]]:
    """The pending list as the live page polls it (no argument values)."""
    return [
        {
            "id": approval.id,
            "tool": approval.tool,
            "principal": visible(approval.principal),
            "created_at": rfc3339(approval.created_at),
            "expires_at": rfc3339(approval.expires_at),
            "client_declined": approval.client_declined_at is not None,
            "principal_beyond_ascii": not approval.principal.isascii(),
        }
        for approval in approvals
    ]

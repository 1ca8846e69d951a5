"""The fixed memory vocabulary: scopes, namespace kinds, memory kinds and writing guidance."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "EVENT_KIND",
    "KIND_GUIDANCE",
    "MEMORY_KINDS",
    "NAMESPACE_KINDS",
    "Scope",
    "kind_requires_occurred_at",
    "parse_scope",
]


class Scope(StrEnum):
    """One of the seven top-level memory areas; each is also a directory name under the root."""

    SELF = "self"
    RELATIONSHIP = "relationship"
    PREFERENCE = "preference"
    PRACTICE = "practice"
    PROJECT = "project"
    KNOWLEDGE = "knowledge"
    AGENT = "agent"


# Declaration order above is the published order; tuples keep it stable for schemas.
NAMESPACE_KINDS: Mapping[Scope, tuple[str, ...]] = MappingProxyType(
    {
        Scope.SELF: ("aspect",),
        Scope.RELATIONSHIP: ("person", "group", "relationship"),
        Scope.PREFERENCE: ("domain",),
        Scope.PRACTICE: ("domain",),
        Scope.PROJECT: ("project",),
        Scope.KNOWLEDGE: ("topic",),
        Scope.AGENT: ("agent",),
    }
)

MEMORY_KINDS: Mapping[Scope, tuple[str, ...]] = MappingProxyType(
    {
        Scope.SELF: ("attribute",),
        Scope.RELATIONSHIP: ("perspective", "summary"),
        Scope.PREFERENCE: ("preference",),
        Scope.PRACTICE: ("practice",),
        Scope.PROJECT: (
            "decision",
            "constraint",
            "state",
            "event",
            "question",
            "reference",
            "summary",
        ),
        Scope.KNOWLEDGE: ("reference", "summary"),
        Scope.AGENT: ("persona", "policy", "checklist", "failure_mode"),
    }
)

EVENT_KIND = "event"

# Shared kind names (summary, reference) mean different things per scope, so guidance is
# keyed by the pair rather than by the kind alone.
KIND_GUIDANCE: Mapping[tuple[Scope, str], str] = MappingProxyType(
    {
        (Scope.SELF, "attribute"): (
            "A lasting fact about the user, such as a trait, circumstance or ability, "
            "stated in the third person."
        ),
        (Scope.RELATIONSHIP, "perspective"): (
            "How the user sees or relates to this person or group, phrased as the "
            "user's own view rather than a verdict."
        ),
        (Scope.RELATIONSHIP, "summary"): (
            "A short overview of who this person or group is to the user and what "
            "matters when they come up."
        ),
        (Scope.PREFERENCE, "preference"): (
            "One like, dislike or default choice of the user in this domain, with "
            "the situation it applies to."
        ),
        (Scope.PRACTICE, "practice"): (
            "A habit, routine or way of working the user follows in this domain, "
            "described so it can be repeated."
        ),
        (Scope.PROJECT, "decision"): (
            "A choice that was settled for the project, with the reason it was made."
        ),
        (Scope.PROJECT, "constraint"): (
            "A limit the project must respect, such as a rule, budget, deadline or "
            "compatibility requirement."
        ),
        (Scope.PROJECT, "state"): (
            "Where the project currently stands; revise it when the situation moves on."
        ),
        (Scope.PROJECT, "event"): (
            "Something that happened in the project at a known instant, recorded "
            "together with its occurrence time."
        ),
        (Scope.PROJECT, "question"): (
            "An open question the project still has to answer, worded so the answer "
            "can be recognised later."
        ),
        (Scope.PROJECT, "reference"): (
            "A pointer to a resource the project relies on, with what it is for."
        ),
        (Scope.PROJECT, "summary"): (
            "A condensed overview of the project or one of its areas for quick orientation."
        ),
        (Scope.KNOWLEDGE, "reference"): (
            "A fact or source about the topic that the user wants kept at hand, "
            "with its origin when known."
        ),
        (Scope.KNOWLEDGE, "summary"): (
            "A distilled explanation of the topic in the user's preferred depth."
        ),
        (Scope.AGENT, "persona"): (
            "How this agent should present itself: tone, voice and manner approved by the user."
        ),
        (Scope.AGENT, "policy"): (
            "A rule this agent must follow in its work, stated as an instruction."
        ),
        (Scope.AGENT, "checklist"): (
            "An ordered list of steps this agent should walk through for a recurring task."
        ),
        (Scope.AGENT, "failure_mode"): (
            "A mistake this agent has made before, with how to notice it and avoid it."
        ),
    }
)


def parse_scope(value: object) -> Scope | None:
    """Return the scope named by ``value``, or None when it is not exactly one of the seven."""
    if type(value) is not str:
        return None
    try:
        return Scope(value)
    except ValueError:
        return None


def kind_requires_occurred_at(kind: str) -> bool:
    """Only events carry an occurrence time, and every event must carry one."""
    return kind == EVENT_KIND

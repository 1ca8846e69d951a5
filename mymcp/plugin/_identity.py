"""Grammars and value types that name plugins and their capabilities."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "CapabilityKind",
    "QualifiedCapabilityId",
    "is_capability_local_id",
    "is_plugin_id",
]

CapabilityKind = Literal["tool"]

# Lowercase kebab: a letter first, a-z0-9 segments joined by single hyphens.
_PLUGIN_ID: Final = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# Lowercase snake: a letter first, a-z0-9 segments joined by single underscores, so the
# `<plugin-id>__<local-id>` binding can never be ambiguous.
_LOCAL_ID: Final = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
MAX_ID_LENGTH: Final = 64


def is_plugin_id(value: object) -> bool:
    """True for a lowercase kebab-case plugin id of at most 64 characters."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_ID_LENGTH
        and _PLUGIN_ID.fullmatch(value) is not None
    )


def is_capability_local_id(value: object) -> bool:
    """True for a lowercase snake-case capability id of at most 64 characters."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_ID_LENGTH
        and _LOCAL_ID.fullmatch(value) is not None
    )


@dataclass(frozen=True, slots=True)
class QualifiedCapabilityId:
    """A capability named by its plugin, its kind and its plugin-local id."""

    plugin_id: str
    kind: CapabilityKind
    local_id: str

    def __post_init__(self) -> None:
        if not is_plugin_id(self.plugin_id):
            raise ValueError("invalid plugin id")
        if self.kind != "tool":
            raise ValueError("unsupported capability kind")
        if not is_capability_local_id(self.local_id):
            raise ValueError("invalid capability local id")

    def __str__(self) -> str:
        return f"{self.plugin_id}:{self.kind}:{self.local_id}"

"""The immutable HostRuntime: the composed tool surface a server generation serves."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from mymcp.runtime._registry import ToolRegistry

__all__ = ["HostRuntime", "new_generation_id"]

_GENERATION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,127}")


def new_generation_id() -> str:
    """An opaque id that tells sessions of one composed runtime from any other's."""
    return f"generation_{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class HostRuntime:
    """Everything the transport needs to serve tools; nothing in it changes after startup.

    Each bound tool in the registry carries its origin, effects and consent.
    """

    registry: ToolRegistry
    generation: str
    server_version: str
    inactive_names: frozenset[str] = frozenset()
    """Public names of tools plugins declare but did not activate (a gate is off)."""

    def __post_init__(self) -> None:
        if not _GENERATION.fullmatch(self.generation):
            raise ValueError("invalid runtime generation id")

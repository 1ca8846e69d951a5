"""The `initialize` instructions: short, and naming only what exists."""

from __future__ import annotations

import re
from pathlib import Path

from mymcp.plugins.mnemosyne.memory import tool_definitions
from mymcp.runtime._list_tools import LIST_TOOLS_NAME
from mymcp.transport import SERVER_INSTRUCTIONS

MANUAL = (Path(__file__).resolve().parents[2] / "docs" / "MANUAL.md").read_text()


def test_instructions_are_short() -> None:
    assert 200 < len(SERVER_INSTRUCTIONS) < 1500


def test_every_tool_named_exists_and_every_memory_tool_is_named() -> None:
    bundled = set(tool_definitions())
    named = set(re.findall(r"\b(?:memory_[a-z_]+|list_tools)\b", SERVER_INSTRUCTIONS))
    assert named == bundled | {LIST_TOOLS_NAME}


def test_every_argument_and_field_named_exists_in_the_schemas() -> None:
    properties: set[str] = set()
    for definition in tool_definitions().values():
        properties |= set(definition["inputSchema"].get("properties", {}))
    for argument in ("reference", "origin", "expected_revision"):
        assert argument in SERVER_INSTRUCTIONS
        assert argument in properties
    # The revision an agent passes back is the one inspect reports (see the manual).
    assert "lifecycle.revision" in SERVER_INSTRUCTIONS
    assert "`lifecycle.revision`" in MANUAL


def test_every_status_named_is_one_the_manual_documents() -> None:
    for status in ("uncertain", "internal_error"):
        assert status in SERVER_INSTRUCTIONS
        assert f"| `{status}` |" in MANUAL


def test_instructions_carry_the_safety_rules() -> None:
    text = SERVER_INSTRUCTIONS.lower()
    for phrase in ("approval", "never store secrets", "passwords", "api keys", "tokens"):
        assert phrase in text

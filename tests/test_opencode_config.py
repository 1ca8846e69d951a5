"""The committed `opencode.json`: read tools allowed, mutations asked, the manual loaded."""

from __future__ import annotations

import json
from pathlib import Path

CONFIG = json.loads((Path(__file__).resolve().parents[1] / "opencode.json").read_text())
POLICY = [
    ("mymcp_*", "deny"),
    ("mymcp_list_tools", "allow"),
    ("mymcp_memory_recall", "allow"),
    ("mymcp_memory_list", "allow"),
    ("mymcp_memory_inspect", "allow"),
    ("mymcp_memory_remember", "ask"),
    ("mymcp_memory_revise", "ask"),
    ("mymcp_memory_archive", "ask"),
    ("mymcp_memory_restore", "ask"),
    ("mymcp_memory_forget", "ask"),
]


def test_permissions_in_order_globally_and_for_the_agent() -> None:
    # OpenCode applies the last matching rule, so the order is part of the policy.
    assert list(CONFIG["permission"].items()) == POLICY
    assert list(CONFIG["agent"]["mymcp"]["permission"].items()) == POLICY


def test_server_entry_and_instructions() -> None:
    server = CONFIG["mcp"]["mymcp"]
    assert (server["type"], server["url"], server["enabled"]) == (
        "remote",
        "http://127.0.0.1:8000/mcp",
        True,
    )
    manual = CONFIG["instructions"]
    assert manual == ["docs/MANUAL.md"]
    assert (Path(__file__).resolve().parents[1] / manual[0]).is_file()

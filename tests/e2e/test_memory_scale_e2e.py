"""Mnemosyne on the real server: what tools/list costs, and a restart from the snapshot."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.server import Sandbox, make_sandbox, serve

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
ALL_GATES = {
    "MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "true",
    "MNEMOSYNE_MEMORY_ARCHIVE_RESTORE_ENABLED": "true",
    "MNEMOSYNE_MEMORY_REVISE_ENABLED": "true",
    "MNEMOSYNE_MEMORY_FORGET_ENABLED": "true",
}
ROOT_FORBIDDEN = {"oneOf", "anyOf", "allOf", "not", "if", "then", "else", "$ref", "$defs"}


class Session:
    """A raw MCP session over HTTP: initialize, then JSON-RPC requests."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(timeout=30.0)
        self.headers = dict(HEADERS)
        self.next_id = 0
        reply = self.post(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "e2e", "version": "0"},
            },
        )
        assert reply.status_code == 200
        self.headers["mcp-session-id"] = reply.headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = "2025-11-25"
        assert self.post("notifications/initialized", notify=True).status_code == 202

    def post(self, method: str, params: Any = None, *, notify: bool = False) -> httpx.Response:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if not notify:
            self.next_id += 1
            message["id"] = self.next_id
        if params is not None:
            message["params"] = params
        return self.http.post(self.url, json=message, headers=self.headers)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        reply = self.post("tools/call", {"name": tool, "arguments": arguments})
        assert reply.status_code == 200, reply.text
        structured: dict[str, Any] = reply.json()["result"]["structuredContent"]
        return structured

    def close(self) -> None:
        self.http.close()


def _remember(session: Session, content: str) -> dict[str, Any]:
    payload = session.call(
        "memory_remember",
        {
            "scope": "knowledge",
            "namespace": {"kind": "topic", "id": "fruit", "label": None},
            "collection": None,
            "kind": "reference",
            "language": "en",
            "title": None,
            "content": content,
            "tags": [],
            "origin": "explicit_user_statement",
        },
    )
    assert payload["status"] == "remembered", payload
    return payload


def test_tools_list_with_every_memory_tool_is_small_and_portable(tmp_path: Path) -> None:
    sandbox = make_sandbox(tmp_path)
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    with serve(sandbox, ALL_GATES) as server:
        session = Session(server.url)
        try:
            reply = session.post("tools/list")
        finally:
            session.close()
    assert reply.status_code == 200
    tools = {tool["name"]: tool for tool in reply.json()["result"]["tools"]}
    memory = {name: tool for name, tool in tools.items() if name.startswith("memory_")}
    assert len(memory) == 8
    sizes = {
        name: len(json.dumps(tool, ensure_ascii=False, separators=(",", ":")).encode())
        for name, tool in memory.items()
    }
    assert max(sizes.values()) <= 5_000, sizes
    assert sum(sizes.values()) <= 20_000, sizes
    for tool in memory.values():
        assert not ROOT_FORBIDDEN & set(tool["inputSchema"]), tool["name"]


def _snapshot_files(sandbox: Sandbox) -> list[Path]:
    return sorted((sandbox.home / ".cache" / "mymcp").glob("memory-index-*.bin"))


# An interrupt, what systemd and launchd send to stop a service, and what a closing
# terminal sends.
@pytest.mark.parametrize(
    "stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_a_restart_starts_from_the_snapshot_and_sees_edits_made_while_down(
    tmp_path: Path, stop: signal.Signals
) -> None:
    sandbox = make_sandbox(tmp_path)
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    with serve(sandbox, ALL_GATES) as server:
        session = Session(server.url)
        try:
            kept = _remember(session, "Quinces ripen late in autumn.")
            gone = _remember(session, "Medlars are eaten half rotten.")
            assert session.call("memory_recall", {"query": "quinces", "scope": "knowledge"})[
                "memories"
            ]
        finally:
            session.close()
        # Stopped, the server saves its index on the way out, in the user's cache
        # directory (it also saves shortly after changes stop coming).
        server.process.send_signal(stop)
        returned = server.process.wait(timeout=60)
    if stop is not signal.SIGINT:
        assert returned == 0  # a graceful stop, exit handlers included
    assert any("Application shutdown complete" in line for line in server.output)
    assert any("index_snapshot outcome=saved" in line for line in server.output)
    assert len(_snapshot_files(sandbox)) == 1
    directory = sandbox.memory_root / "knowledge" / "fruit"
    kept_path = directory / f"{kept['reference']['id']}.json"
    kept_path.write_text(kept_path.read_text().replace("Quinces ripen", "Quinces soften"))
    (directory / f"{gone['reference']['id']}.json").unlink()
    with serve(sandbox, ALL_GATES) as server:
        session = Session(server.url)
        try:
            recalled = session.call("memory_recall", {"query": "quinces", "scope": "knowledge"})
            medlars = session.call("memory_recall", {"query": "medlars", "scope": "knowledge"})
            listed = session.call("memory_list", {"scope": "knowledge"})
        finally:
            session.close()
    assert [m["content"] for m in recalled["memories"]] == ["Quinces soften late in autumn."]
    assert medlars == {"status": "no_matches", "memories": []}
    assert listed["page"]["total_count"] == 1
    # The second server started from the snapshot, and no log names a record's text.
    assert any("index_snapshot outcome=loaded rows=2 " in line for line in server.output)
    assert "Quinces" not in "".join(server.output)

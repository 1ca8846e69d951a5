"""Mnemosyne mutations end to end: the real server driven by the official MCP SDK client."""

from __future__ import annotations

import json
import stat
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from tests.e2e.server import Sandbox, serve

ALL_GATES = {
    "MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "true",
    "MNEMOSYNE_MEMORY_ARCHIVE_RESTORE_ENABLED": "true",
    "MNEMOSYNE_MEMORY_REVISE_ENABLED": "true",
    "MNEMOSYNE_MEMORY_FORGET_ENABLED": "true",
}
MUTATIONS = {
    "memory_remember",
    "memory_revise",
    "memory_archive",
    "memory_restore",
    "memory_forget",
}
MARKER = "zqxe2emarker"


async def _journey(url: str) -> dict[str, Any]:
    steps: dict[str, Any] = {}
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):

        async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(tool, arguments)
            payload = dict(result.structured_content or {})
            (block,) = result.content
            assert isinstance(block, TextContent)
            assert json.loads(block.text) == payload
            assert bool(result.is_error) == (payload["status"] in ERROR_STATUSES), payload
            return payload

        steps["tools"] = [tool.name for tool in (await client.list_tools()).tools]
        remembered = await call(
            "memory_remember",
            {
                "scope": "project",
                "namespace": {"kind": "project", "id": "mnemosyne", "label": "Mnemosyne"},
                "collection": {"id": "decisions", "label": "Decisions"},
                "kind": "decision",
                "language": "en",
                "title": f"Consent boundary {MARKER}",
                "content": f"Every mutation needs per-call approval {MARKER}.",
                "tags": ["consent"],
                "origin": "user_approved_proposal",
            },
        )
        steps["remember"] = remembered
        reference = remembered["reference"]
        steps["recall"] = await call("memory_recall", {"query": "consent", "scope": "project"})
        steps["inspect"] = await call("memory_inspect", {"reference": reference})
        steps["refused"] = await call(
            "memory_revise",
            {
                "reference": reference,
                "expected_revision": 1,
                "namespace_label": "Mnemosyne",
                "collection_label": "Decisions",
                "title": None,
                "content": f"token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln {MARKER}",
                "tags": [],
            },
        )
        steps["revise"] = await call(
            "memory_revise",
            {
                # A client that stringifies nested arguments still works.
                "reference": json.dumps(reference),
                "expected_revision": 1,
                "namespace_label": "Mnemosyne",
                "collection_label": None,
                "title": None,
                "content": "Each mutation is approved call by call.",
                "tags": ["consent", "approval"],
            },
        )
        target = {"reference": reference}
        steps["archive"] = await call("memory_archive", {**target, "expected_revision": 2})
        steps["recall_archived"] = await call(
            "memory_recall", {"query": "approved", "scope": "project"}
        )
        steps["restore"] = await call("memory_restore", {**target, "expected_revision": 3})
        steps["archive_again"] = await call("memory_archive", {**target, "expected_revision": 4})
        steps["forget_stale"] = await call("memory_forget", {**target, "expected_revision": 4})
        steps["forget"] = await call("memory_forget", {**target, "expected_revision": 5})
        steps["inspect_gone"] = await call("memory_inspect", {"reference": reference})
    return steps


ERROR_STATUSES = {
    "invalid_request",
    "policy_error",
    "refused",
    "not_found",
    "conflict",
    "uncertain",
    "storage_error",
    "internal_error",
}


def test_mutation_journey_through_the_real_server(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    with serve(sandbox, ALL_GATES) as server:
        steps = anyio.run(_journey, server.url)
        log = "".join(server.output)

    assert set(steps["tools"]) >= MUTATIONS
    remembered = steps["remember"]
    assert remembered["status"] == "remembered"
    reference = remembered["reference"]
    assert reference["schema_version"] == 2
    assert remembered["lifecycle"] == {"state": "active", "revision": 1}
    assert [m["reference"] for m in steps["recall"]["memories"]] == [reference]
    assert steps["inspect"]["memory"]["reference"] == reference

    refused = steps["refused"]
    assert (refused["status"], refused["code"], refused["field"], refused["reason"]) == (
        "refused",
        "disallowed_content",
        "content",
        "compact_token_shape",
    )
    assert steps["revise"] == {
        "status": "revised",
        "reference": reference,
        "lifecycle": {"state": "active", "revision": 2},
    }
    assert steps["archive"]["status"] == "archived"
    assert steps["recall_archived"]["status"] == "no_matches"
    assert steps["restore"]["lifecycle"] == {"state": "active", "revision": 4}
    assert steps["archive_again"]["lifecycle"] == {"state": "archived", "revision": 5}
    assert steps["forget_stale"]["code"] == "revision_conflict"
    assert steps["forget"] == {"status": "forgotten", "reference": reference}
    assert steps["inspect_gone"]["code"] == "not_found"

    collection = sandbox.memory_root / "project" / "mnemosyne" / "decisions"
    assert collection.is_dir()
    assert [p.name for p in collection.iterdir()] == []
    assert stat.S_IMODE(sandbox.memory_root.stat().st_mode) == 0o700
    assert "event=memory_remember outcome=remembered" in log
    assert "event=memory_forget outcome=forgotten" in log
    assert MARKER not in log


async def _tool_names(url: str) -> tuple[list[str], list[str], str]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        listed = [tool.name for tool in (await client.list_tools()).tools]
        called = await client.call_tool("list_tools", {})
        try:
            await client.call_tool("memory_remember", {"scope": "project"})
        except Exception as exc:  # the SDK raises the JSON-RPC error
            dispatch = str(exc)
        else:
            dispatch = "dispatched"
        return listed, list((called.structured_content or {})["tools"]), dispatch


def test_gate_off_server_lists_no_mutation_tools(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    gates = {**dict.fromkeys(ALL_GATES, "false"), "MNEMOSYNE_MEMORY_FORGET_ENABLED": "true"}
    with serve(sandbox, gates) as server:
        listed, advertised, dispatch = anyio.run(_tool_names, server.url)
    assert "Unknown tool: memory_remember" in dispatch
    for names in (listed, advertised):
        assert "memory_forget" in names
        assert not (MUTATIONS - {"memory_forget"}) & set(names)
    assert not sandbox.memory_root.exists()

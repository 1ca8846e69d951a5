"""The real server's log: a failure is one content-free line unless debug output is asked
for, and other libraries stay at WARNING."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.e2e.server import Sandbox, serve
from tests.e2e.test_external_plugins import _plugin_config, _synthetic_plugin

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
SECRET = "hunter2-in-/home/someone/private"

_FAILING_MODULE = f"""
import json
from pathlib import Path
from mymcp.plugin import (ActivatedTool, Consent, PluginAdapter, PluginContribution,
    QualifiedCapabilityId, ToolEffects, manifest_from_mapping)

def _explode(arguments):
    raise RuntimeError({SECRET!r})

def mymcp_plugin_v1():
    definition = manifest_from_mapping(
        json.loads(Path(__file__).with_name("manifest.json").read_text()))
    tool = ActivatedTool(
        capability=QualifiedCapabilityId(definition.plugin_id, "tool", "ping"),
        tool={{"description": "Always fails.", "inputSchema": {{"type": "object"}}}},
        handler=_explode,
        effects=ToolEffects(read_only=True, destructive=False, idempotent=True, open_world=False),
        consent=Consent.NONE,
    )
    return PluginAdapter(definition, PluginContribution(definition.plugin_id,
                                                        definition.version, (tool,)))
"""

pytestmark = pytest.mark.slow


def _call_failing_tool(url: str) -> dict[str, object]:
    with httpx.Client(timeout=10) as client:
        opened = client.post(
            url,
            json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
            headers=HEADERS,
        )
        headers = {
            **HEADERS,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        call = {"name": "failing__ping", "arguments": {}}
        reply = client.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call},
            headers=headers,
        )
        assert reply.status_code == 200
        result: dict[str, object] = reply.json()["result"]
        return result


@pytest.mark.parametrize("debug", [False, True])
def test_a_failing_tool_is_one_line_unless_debug_is_asked_for(
    sandbox: Sandbox, debug: bool
) -> None:
    folder = _synthetic_plugin(sandbox, "failing", "failing_plugin", _FAILING_MODULE)
    sandbox.write_config(
        _plugin_config(sandbox, "failing", folder / "manifest.json", "failing_plugin")
    )
    environment = {"PYTHONPATH": str(folder)}
    if debug:
        environment["MYMCP_LOG_LEVEL"] = "debug"
    with serve(sandbox, environment) as server:
        result = _call_failing_tool(server.url)
        request_id = result["structuredContent"]["request_id"]  # type: ignore[index]
        assert SECRET not in json.dumps(result)
    log = "".join(server.output)
    failures = [line for line in server.output if "tool_failure" in line]
    assert failures == [
        f"ERROR:mymcp.transport.tools:tool_failure request_id={request_id} "
        "tool=failing__ping error_type=RuntimeError\n"
    ]
    if debug:
        assert "Traceback" in log
    else:
        assert "Traceback" not in log
        assert SECRET not in log
        assert "/home/someone" not in log


def test_other_libraries_log_at_warning_unless_debug_is_asked_for(sandbox: Sandbox) -> None:
    probe = (
        "import logging, json\n"
        "from mymcp.cli import _configure_logging\n"
        "_configure_logging()\n"
        "print(json.dumps({n: logging.getLogger(n).getEffectiveLevel() for n in "
        "['httpx', 'httpcore', 'uvicorn.error', 'mymcp', 'mcp', 'asyncio']}))\n"
    )
    levels = {}
    for value in ("", "debug"):
        environment = sandbox.environ({"MYMCP_LOG_LEVEL": value})
        ran = subprocess.run(
            [sys.executable, "-c", probe],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        levels[value] = json.loads(ran.stdout)
    assert levels[""] == {
        "httpx": 30,
        "httpcore": 30,
        "asyncio": 30,
        "uvicorn.error": 20,
        "mymcp": 20,
        "mcp": 20,
    }
    assert set(levels["debug"].values()) == {10}


def test_every_request_line_and_the_shutdown_lines_reach_the_log(sandbox: Sandbox) -> None:
    # Per-request lines are written once per event-loop iteration; none may be lost, and
    # uvicorn's last lines (written just before it re-raises SIGTERM) must be there too.
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    calls = 50
    with serve(sandbox) as server, httpx.Client(timeout=10) as client:
        opened = client.post(
            server.url,
            json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
            headers=HEADERS,
        )
        headers = {
            **HEADERS,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        for number in range(1, calls + 1):
            ping = {"jsonrpc": "2.0", "id": number, "method": "ping"}
            assert client.post(server.url, json=ping, headers=headers).status_code == 200
    lines = [line.rstrip("\n") for line in server.output]
    for number in range(1, calls + 1):
        assert f"INFO:mcp:request id={number} method=ping" in lines
        assert any(
            line.startswith(f"INFO:mcp:response id={number} method=ping outcome=ok")
            for line in lines
        )
    assert any("Finished server process" in line for line in lines)

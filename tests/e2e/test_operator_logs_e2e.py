"""The real server's log: a failure is one content-free line unless debug output is asked
for, and other libraries stay at WARNING."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.e2e.server import Sandbox, log_and_errors, run_cli, serve
from tests.e2e.test_external_plugins import _WORKING_MODULE, _synthetic_plugin

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


STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
TEXT_LINE = re.compile(rf"({STAMP}) (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+) (.*)")


def _text_lines(output: list[str]) -> list[tuple[str, str, str]]:
    """(level, logger, message) of every log line; fails on a line in any other shape."""
    parsed = []
    for line in output:
        match = TEXT_LINE.fullmatch(line.rstrip("\n"))
        if match is None:  # a traceback line under debug belongs to the line before
            assert line.startswith(("Traceback", " ", "RuntimeError")), line
            continue
        stamp = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert abs((datetime.now(UTC) - stamp).total_seconds()) < 600  # UTC, not local time
        parsed.append((match[2], match[3], match[4]))
    return parsed


@pytest.mark.parametrize("debug", [False, True])
def test_a_failing_tool_is_one_line_unless_debug_is_asked_for(
    sandbox: Sandbox, debug: bool
) -> None:
    folder = _synthetic_plugin(sandbox, "failing", "failing_plugin", _FAILING_MODULE)
    sandbox.write_config(
        sandbox.plugin_config("failing", folder / "manifest.json", "failing_plugin")
    )
    environment = {"PYTHONPATH": str(folder)}
    if debug:
        environment["MYMCP_LOG_LEVEL"] = "debug"
    with serve(sandbox, environment) as server:
        result = _call_failing_tool(server.url)
        request_id = result["structuredContent"]["request_id"]  # type: ignore[index]
        assert SECRET not in json.dumps(result)
    log = "".join(server.output)
    lines = _text_lines(server.output)
    failures = [line for line in lines if "tool_failure" in line[2]]
    assert failures == [
        (
            "ERROR",
            "mymcp.transport.tools",
            f"tool_failure request_id={request_id} tool=failing__ping error_type=RuntimeError",
        )
    ]
    # The request line names the tool by its public name.
    assert ("INFO", "mcp", "request id=1 method=tools/call tool=failing__ping") in lines
    if debug:
        assert "Traceback" in log
    else:
        assert "Traceback" not in log
        assert SECRET not in log
        assert "/home/someone" not in log


def test_other_libraries_log_at_warning_unless_debug_is_asked_for(sandbox: Sandbox) -> None:
    probe = (
        "import logging, json\n"
        "from mymcp.logs import configure_logging, log_settings\n"
        "configure_logging(log_settings())\n"
        "print(json.dumps({n: logging.getLogger(n).getEffectiveLevel() for n in "
        "['httpx', 'httpcore', 'uvicorn.error', 'mymcp', 'mcp', 'asyncio']}))\n"
    )
    levels = {}
    for value in ("", "debug", "error"):
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
    assert set(levels["error"].values()) == {40}


def test_every_request_line_and_the_shutdown_lines_reach_the_log(sandbox: Sandbox) -> None:
    # Per-request lines are written together; none may be lost, and uvicorn's last lines
    # (written just before it re-raises SIGTERM) must be there too, in the same format.
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    calls = 50
    with serve(sandbox) as server, httpx.Client(timeout=10) as client:
        headers = _session(client, server.url)
        for number in range(1, calls + 1):
            ping = {"jsonrpc": "2.0", "id": number, "method": "ping"}
            assert client.post(server.url, json=ping, headers=headers).status_code == 200
        unknown = {"name": "no_such_tool", "arguments": {}}
        call = {"jsonrpc": "2.0", "id": "u", "method": "tools/call", "params": unknown}
        client.post(server.url, json=call, headers=headers)
    lines = _text_lines(server.output)
    messages = [message for _, _, message in lines]
    for number in range(1, calls + 1):
        assert f"request id={number} method=ping" in messages
        assert any(
            message.startswith(f"response id={number} method=ping outcome=ok")
            for message in messages
        )
    # The memory index was built in the background as the server started.
    assert any(m.startswith("index_build outcome=done records=0 ") for m in messages)
    # A name the runtime does not serve is client text: it is never logged.
    assert "request id=u method=tools/call tool=<unknown>" in messages
    assert not any("no_such_tool" in line for line in server.output)
    assert ("INFO", "uvicorn.error", f"Finished server process [{server.process.pid}]") in lines


def _session(client: httpx.Client, url: str) -> dict[str, str]:
    opened = client.post(
        url,
        json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
        headers=HEADERS,
    )
    return {
        **HEADERS,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }


def test_json_lines_from_the_configuration_for_mymcp_and_uvicorn_alike(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table() + 'log_format = "json"\n')
    with serve(sandbox) as server, httpx.Client(timeout=10) as client:
        headers = _session(client, server.url)
        ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
        assert client.post(server.url, json=ping, headers=headers).status_code == 200
    records = [json.loads(line) for line in server.output]
    assert all(set(record) == {"time", "level", "logger", "message"} for record in records)
    assert all(re.fullmatch(STAMP, record["time"]) for record in records)
    loggers = {record["logger"] for record in records}
    assert {"mymcp.host.configuration", "mcp", "uvicorn.error"} <= loggers
    # The configuration's own load line is written in the format the file asks for.
    assert records[0]["logger"] == "mymcp.host.configuration"
    assert {"level": "INFO", "logger": "mcp", "message": "request id=7 method=ping"}.items() <= (
        next(r for r in records if r["message"] == "request id=7 method=ping").items()
    )


@pytest.mark.parametrize(
    ("options", "environment"),
    [
        (["--log-level", "warning"], {}),
        (["check", "--log-level", "warning"], {}),
        ([], {"MYMCP_LOG_LEVEL": "warning"}),
    ],
)
def test_the_command_line_and_environment_choose_the_level(
    sandbox: Sandbox, options: list[str], environment: dict[str, str]
) -> None:
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table() + 'log_level = "debug"\n')
    command = options if "check" in options else [*options, "check"]
    checked = run_cli(command, sandbox.environ(environment))
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr == ""  # no INFO line at warning, though the file says debug
    loud = run_cli(["check"], sandbox.environ())
    assert any(" DEBUG " in line or " INFO " in line for line in loud.stderr.splitlines())


def test_the_command_line_format_wins_over_the_file(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table() + 'log_format = "json"\n')
    checked = run_cli(["--log-format", "text", "check"], sandbox.environ())
    assert checked.returncode == 0, checked.stderr
    assert _text_lines(checked.stderr.splitlines(keepends=True))
    as_json = run_cli(["check"], sandbox.environ())
    assert all(json.loads(line)["time"] for line in as_json.stderr.splitlines())


@pytest.mark.parametrize("command", ["check", "stdio", "serve"])
def test_a_start_that_fails_after_the_file_is_read_logs_as_the_file_asks(
    sandbox: Sandbox, command: str
) -> None:
    # A JSON log reader gets JSON exactly when something goes wrong, whatever the command.
    sandbox.write_config(
        "schema_version = 8\n"
        + sandbox.server_table()
        + 'log_format = "json"\nlog_level = "warning"\n'
        + '[[policy.rules]]\nprincipals = ["*"]\nallow = ["no_such_tool"]\n'
    )
    ran = run_cli([command], sandbox.environ())
    assert ran.returncode == 1
    logged, errors = log_and_errors(ran.stderr)
    assert len(errors) == 1
    assert "(code=policy_unknown_tool)" in errors[0]
    records = [json.loads(line) for line in logged]
    assert records
    assert {record["level"] for record in records} <= {"WARNING", "ERROR"}


def _noisy_plugin(sandbox: Sandbox, module: str) -> Path:
    """A plugin of `module`'s source, declared with the log in JSON; its folder."""
    folder = _synthetic_plugin(sandbox, "noisy", "noisy_plugin", module)
    sandbox.write_config(
        "schema_version = 8\n"
        + sandbox.server_table()
        + 'log_format = "json"\n'
        + '[[plugins]]\nid = "noisy"\nenabled = true\nmodule = "noisy_plugin"\n'
        + f'manifest_path = "{folder / "manifest.json"}"\n'
    )
    return folder


@pytest.mark.parametrize("command", ["check", "stdio", "plugin check"])
def test_what_a_plugin_prints_while_imported_is_a_log_line_in_the_chosen_format(
    sandbox: Sandbox, command: str
) -> None:
    # Not raw text in a JSON log stream, and never part of a check's report. A line one
    # stream leaves unfinished is not completed by what the other stream writes next.
    printing = (
        "import sys\nprint('HELLO at import')\nsys.stdout.write('unfinished')\n"
        "sys.stdout.flush()\nprint('noise', file=sys.stderr)\n"
    )
    folder = _noisy_plugin(sandbox, printing + _WORKING_MODULE)
    arguments = command.split()
    if command == "plugin check":
        arguments += [str(folder / "manifest.json"), "--import", "noisy_plugin"]
    environment = sandbox.environ({"PYTHONPATH": str(folder), "MYMCP_LOG_FORMAT": "json"})
    ran = run_cli(arguments, environment)
    assert ran.returncode == 0, ran.stderr
    records = [json.loads(line) for line in ran.stderr.splitlines()]
    printed = [r["message"] for r in records if r["logger"] == "output"]
    assert sorted(printed) == ["HELLO at import", "noise", "unfinished"]
    if command == "check":
        assert ran.stdout.startswith("configuration: ")
    elif command == "plugin check":
        assert ran.stdout.startswith("mymcp: manifest OK: noisy ")
        assert "mymcp: module OK: noisy_plugin" in ran.stdout
    else:
        assert ran.stdout == ""  # the protocol's stream: nothing but replies
    assert "HELLO" not in ran.stdout


def test_a_server_started_with_its_stdout_closed_serves_and_logs_each_line_once(
    sandbox: Sandbox,
) -> None:
    # A service manager may start it so. Plugins are imported with the standard streams
    # diverted into the log; a closed descriptor 1 must neither stop that nor let the
    # log's own copy of stderr be diverted back into itself.
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table())
    with serve(sandbox, stdout_closed=True) as server:
        assert httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=10).status_code == 200
    assert server.process.returncode == 0
    assert not [line for line in server.output if "Traceback" in line]
    assert not [line for line in server.output if " output " in line]  # nothing echoed back
    assert sum("host_configuration outcome=loaded" in line for line in server.output) == 1


def test_what_a_plugin_prints_while_serving_is_a_log_line_in_the_chosen_format(
    sandbox: Sandbox,
) -> None:
    printing = "import sys\nprint('HELLO at import')\n"
    module = printing + _WORKING_MODULE.replace(
        'handler=lambda arguments: structured_result({"pong": True})',
        'handler=lambda arguments: (print("CALLED", file=sys.stderr), '
        'structured_result({"pong": True}))[1]',
    )
    assert "CALLED" in module
    folder = _noisy_plugin(sandbox, module)
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "noisy__ping", "arguments": {}, "_meta": meta},
    }
    headers = {
        **HEADERS,
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "noisy__ping",
    }
    with serve(sandbox, {"PYTHONPATH": str(folder)}) as server:
        answered = httpx.post(server.url, json=call, headers=headers, timeout=10)
        assert answered.json()["result"]["structuredContent"] == {"pong": True}
    records = [json.loads(line) for line in server.output]  # every line is JSON
    printed = [r["message"] for r in records if r["logger"] == "output"]
    assert printed == ["HELLO at import", "CALLED"]


def test_the_reload_worker_of_mymcp_dev_logs_in_the_same_format(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table() + 'log_format = "json"\n')
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("mymcp-dev"))],
        env=sandbox.environ(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert process.stderr is not None
        for line in process.stderr:  # ends when the process does: no sleeping
            lines.append(line)
            if "Application startup complete" in line:
                break
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=30)
    records = [json.loads(line) for line in lines]
    # The launcher's lines and the worker's (a separate process uvicorn starts) alike.
    loggers = [record["logger"] for record in records]
    assert loggers.count("mymcp.host.configuration") == 2
    assert "mymcp.host.bootstrap" in loggers
    assert records[-1]["message"] == "Application startup complete."

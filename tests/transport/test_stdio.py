"""`mymcp stdio`: the same runtime over newline-delimited JSON-RPC on stdin and stdout.

The real command runs in a subprocess with a private HOME and is driven by the official
SDK's stdio client in both connect modes, and by raw lines where the SDK would never
send what is tested (overlong lines, garbage). Cancellation is tested in-process, with
pipes, where the test controls when a tool finishes.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio import to_thread
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitRequestParams, ElicitResult

from mymcp.auth._principal import registered_principal
from mymcp.governance import Governance, Policy, read_records
from mymcp.plugin import structured_result
from mymcp.runtime import compose_runtime
from mymcp.transport import Dispatcher, StatelessEra, StdioServer
from mymcp.transport._dispatch import _WorkerLimits
from mymcp.transport._jsonrpc import REQUEST_ID_IN_USE, Request
from mymcp.transport._stdio import DRAIN_SECONDS
from tests.console.conftest import csrf_of, remember_arguments
from tests.e2e.auth_sandbox import bearer_config
from tests.e2e.server import Sandbox, make_sandbox, run_cli
from tests.synthetic import contribution, external_bindings, schema, tool

pytestmark = pytest.mark.slow

NOISY_PLUGIN = """
print("noise at import")


def _handler(arguments):
    print("noise during a call")
    return structured_result({"ok": True})
"""


def _params(sandbox: Sandbox, extra_env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "mymcp.cli", "stdio"],
        env=sandbox.environ(extra_env),
        cwd=str(sandbox.root),
    )


async def _session(
    params: StdioServerParameters,
    mode: str,
    call: str = "list_tools",
    arguments: dict[str, Any] | None = None,
    elicit: Any = None,
) -> dict[str, Any]:
    async with Client(params, mode=mode, elicitation_callback=elicit) as client:
        listed = await client.list_tools()
        try:
            called: Any = await client.call_tool(call, arguments or {})
        except MCPError as exc:
            called = exc
        return {
            "version": client.protocol_version,
            "names": [t.name for t in listed.tools],
            "called": called,
        }


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return make_sandbox(tmp_path)


@pytest.mark.parametrize(("mode", "revision"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_the_sdk_stdio_client_lists_and_calls_in_both_eras(
    sandbox: Sandbox, mode: str, revision: str
) -> None:
    outcome = anyio.run(_session, _params(sandbox), mode)
    assert outcome["version"] == revision
    assert outcome["names"][0] == "list_tools"
    assert {"memory_recall", "memory_list", "memory_inspect"} <= set(outcome["names"])
    called = outcome["called"]
    assert called.is_error is False
    assert called.structured_content["tools"] == outcome["names"]


POLICY_CONFIG = """schema_version = 8
[policy]
default = "deny"
[[policy.rules]]
principals = ["local"]
allow = ["memory_recall"]
"""


def test_policy_and_audit_see_the_local_principal(sandbox: Sandbox) -> None:
    sandbox.write_config(POLICY_CONFIG)
    for mode in ("auto", "legacy"):
        outcome = anyio.run(functools.partial(_session, _params(sandbox), mode, "memory_list"))
        assert outcome["names"] == ["list_tools", "memory_recall"]
        assert isinstance(outcome["called"], MCPError)
        assert outcome["called"].error.message == "Unknown tool: memory_list"
    records = list(read_records(sandbox.home / ".local" / "state" / "mymcp" / "audit"))
    assert {r["principal"] for r in records if "principal" in r} == {"local"}
    denied = [r for r in records if r.get("event") == "tool_call"]
    assert [(r["decision"], "session" in r) for r in denied] == [
        ("denied", False),  # the stateless era has no session
        ("denied", True),  # the handshake era's one session of that process
    ]
    events = [r["event"] for r in records if "session" in r]
    assert events == ["session_open", "tool_call", "session_close"]


def _raw(
    sandbox: Sandbox, lines: list[bytes], env: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], str, int]:
    finished = subprocess.run(
        [sys.executable, "-m", "mymcp.cli", "stdio"],
        input=b"".join(lines),
        env=sandbox.environ(env),
        capture_output=True,
        timeout=60,
        check=False,
    )
    replies = [json.loads(line) for line in finished.stdout.splitlines()]
    return replies, finished.stderr.decode(), finished.returncode


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
}


def test_an_initialize_refused_for_its_params_leaves_the_session_to_open(
    sandbox: Sandbox,
) -> None:
    # The process has one session: a malformed initialize must not be what opens it.
    malformed = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": 5}}
    replies, _, status = _raw(sandbox, [_line(malformed), _line({**INITIALIZE, "id": 2})])
    assert status == 0
    assert replies[0]["error"] == {
        "code": -32602,
        "message": "initialize params: capabilities must be an object",
    }
    assert replies[1]["result"]["protocolVersion"] == "2025-11-25"


def test_a_stateless_request_naming_a_handshake_revision_is_told_to_initialize(
    sandbox: Sandbox,
) -> None:
    def listing(version: str) -> bytes:
        meta = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        return _line({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}})

    replies, _, _ = _raw(sandbox, [listing("2025-11-25"), listing("2099-01-01")])
    handshake, unknown = (reply["error"] for reply in replies)
    assert handshake["code"] == unknown["code"] == -32022
    assert handshake["message"] == (
        "2025-11-25 is a handshake revision: open a session with initialize"
    )
    assert handshake["data"]["requested"] == "2025-11-25"
    assert "handshake" not in unknown["message"]


def test_bad_lines_are_answered_and_reading_goes_on_until_eof(sandbox: Sandbox) -> None:
    overlong = b'{"jsonrpc":"2.0","id":9,"method":"ping","pad":"' + b"x" * (1 << 21) + b'"}\n'
    lines = [
        b"not json\n",
        overlong,
        b'[{"jsonrpc":"2.0","id":3,"method":"ping"}]\n',
        _line({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),  # before initialize
        _line(INITIALIZE),
        _line({**INITIALIZE, "id": 5}),  # one session per process
        _line({"jsonrpc": "2.0", "id": 6, "method": "ping"}),
    ]
    replies, stderr, status = _raw(sandbox, lines)
    assert status == 0, stderr
    by_id = {reply["id"]: reply for reply in replies if reply["id"] is not None}
    unnumbered = [reply["error"] for reply in replies if reply["id"] is None]
    assert unnumbered == [
        {"code": -32700, "message": "Parse error"},
        {"code": -32600, "message": "Message too long"},
        {"code": -32600, "message": "Batching is not supported"},
    ]
    assert by_id[4]["error"]["code"] == -32600
    assert by_id[1]["result"]["protocolVersion"] == "2025-11-25"
    assert by_id[5]["error"]["message"] == "This process's session is already open"
    assert by_id[6]["result"] == {}
    assert "x" * 64 not in stderr  # nothing of a message reaches the log


def test_the_parse_error_says_what_was_refused_as_over_http(sandbox: Sandbox) -> None:
    lines = [
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}\n',
        b'{"jsonrpc":"2.0","id":1,"method":"\xff"}\n',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":' + b"7" * 4301 + b"}}\n",
        b"{nope\n",
    ]
    replies, _, status = _raw(sandbox, lines)
    assert status == 0
    assert [reply["error"]["message"] for reply in replies] == [
        "Parse error: a string escapes an unpaired surrogate (\\ud800-\\udfff), which is no text",
        "Parse error: the line is not valid UTF-8 text",
        "Parse error: an integer has more than 4300 digits, more than this server reads",
        "Parse error",
    ]
    assert {reply["error"]["code"] for reply in replies} == {-32700}


def test_stdout_carries_only_replies_even_when_a_plugin_prints(sandbox: Sandbox) -> None:
    plugin_path = sandbox.serve_plugin("noisy", NOISY_PLUGIN)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
    lines = [_line(INITIALIZE), _line({**call, "params": {"name": "noisy__tool_0"}})]
    replies, stderr, status = _raw(sandbox, lines, plugin_path)
    assert status == 0, stderr
    # Every stdout line parsed as JSON (above); the prints went to stderr instead.
    assert [reply["id"] for reply in replies] == [1, 2]
    assert replies[1]["result"]["structuredContent"] == {"ok": True}
    assert "noise at import" in stderr
    assert "noise during a call" in stderr


def test_a_startup_failure_is_reported_on_stderr_only(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 99\n")
    replies, stderr, status = _raw(sandbox, [_line(INITIALIZE)])
    assert (replies, status) == ([], 1)
    assert "code=unsupported_schema_version" in stderr


def test_stdio_serves_whatever_the_http_authentication_would_need(sandbox: Sandbox) -> None:
    # Its one caller is the local user: a missing verifier file (or an issuer out of
    # reach) stops `serve` and `check`, but not the process a desktop client starts.
    missing = sandbox.root / "credentials" / "operator-bearer.json"
    sandbox.write_config(bearer_config(sandbox, missing))
    replies, stderr, status = _raw(sandbox, [_line(INITIALIZE)])
    assert status == 0, stderr
    assert replies[0]["result"]["protocolVersion"] == "2025-11-25"
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 1
    assert "(code=verifier_source)" in checked.stderr


def test_end_of_input_ends_the_process_cleanly(sandbox: Sandbox) -> None:
    replies, stderr, status = _raw(sandbox, [])
    assert (replies, status) == ([], 0)
    assert "Traceback" not in stderr


# --- approval ----------------------------------------------------------------------------


def _approval_config(port: int) -> str:
    return (
        f'schema_version = 8\n[server]\naddress = "127.0.0.1"\nport = {port}\n'
        '[approval]\ntools = ["@consent_required"]\n'
    )


REMEMBER = remember_arguments("Stdio works")
GATES = {"MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "true"}


def _approve_in_console(sandbox: Sandbox, url: str) -> None:
    """What the person does: sign in with `mymcp console` and approve the call."""
    signed = run_cli(["console", "--no-browser"], sandbox.environ())
    assert signed.returncode == 0, signed.stderr
    link = signed.stdout.strip().splitlines()[-1]
    origin = url.split("/console/")[0]
    with httpx.Client(timeout=10, trust_env=False) as browser:
        csrf = csrf_of(browser.get(link, follow_redirects=True).text)
        page = browser.get(url)
        assert "memory_remember" in page.text
        decided = browser.post(
            url,
            data={"csrf": csrf, "decision": "approve"},
            headers={"origin": origin},
            follow_redirects=False,
        )
        assert decided.status_code == 303


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_approval_is_decided_in_the_console_this_process_serves(
    sandbox: Sandbox, mode: str
) -> None:
    sandbox.write_config(_approval_config(sandbox.port))

    async def steps() -> tuple[Any, Any]:
        async with Client(_params(sandbox, GATES), mode=mode) as client:
            first = await client.call_tool("memory_remember", REMEMBER)
            url = first.structured_content["approval_url"]
            await anyio.to_thread.run_sync(_approve_in_console, sandbox, url)
            return first, await client.call_tool("memory_remember", REMEMBER)

    first, second = anyio.run(steps)
    payload = first.structured_content
    assert payload["status"] == "approval_required"
    assert payload["approval_url"].startswith(f"http://127.0.0.1:{sandbox.port}/console/approvals/")
    assert second.is_error is False
    assert second.structured_content["status"] == "remembered"


def test_a_url_capable_client_is_sent_to_the_console_and_its_retry_runs(sandbox: Sandbox) -> None:
    sandbox.write_config(_approval_config(sandbox.port))
    asked: list[str] = []

    async def elicit(context: Any, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.url)  # type: ignore[union-attr]
        await anyio.to_thread.run_sync(_approve_in_console, sandbox, params.url)  # type: ignore[union-attr]
        return ElicitResult(action="accept")

    outcome = anyio.run(
        functools.partial(
            _session, _params(sandbox, GATES), "auto", "memory_remember", REMEMBER, elicit
        )
    )
    assert outcome["version"] == "2026-07-28"
    assert len(asked) == 1
    assert outcome["called"].structured_content["status"] == "remembered"


@pytest.mark.parametrize(("version", "url_error"), [("2025-11-25", True), ("2025-06-18", False)])
def test_url_elicitation_is_asked_for_only_in_a_revision_that_has_it(
    sandbox: Sandbox, version: str, url_error: bool
) -> None:
    sandbox.write_config(_approval_config(sandbox.port))
    capabilities = {"elicitation": {"url": {}}}
    opening = {**INITIALIZE, "params": {**INITIALIZE["params"], "protocolVersion": version}}
    opening["params"]["capabilities"] = capabilities
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "memory_remember", "arguments": REMEMBER},
    }
    replies, _, status = _raw(sandbox, [_line(opening), _line(call)], GATES)
    assert status == 0
    assert replies[0]["result"]["protocolVersion"] == version
    if url_error:
        assert replies[1]["error"]["code"] == -32042
    else:
        assert replies[1]["result"]["structuredContent"]["code"] == "approval_required"


def test_without_its_own_console_a_call_that_needs_approval_is_refused(sandbox: Sandbox) -> None:
    sandbox.write_config(_approval_config(sandbox.port))
    with socket.socket() as taken:  # another server holds the configured address
        taken.bind(("127.0.0.1", sandbox.port))
        taken.listen(1)
        outcome = anyio.run(
            functools.partial(
                _session, _params(sandbox, GATES), "auto", "memory_remember", REMEMBER
            )
        )
    payload = outcome["called"].structured_content
    assert (payload["status"], payload["code"]) == ("approval_unavailable", "approval_unavailable")
    assert not any((sandbox.memory_root / "project").rglob("*.json"))


# --- in-process: cancellation ------------------------------------------------------------


@pytest.fixture
def pipes() -> Iterator[tuple[Any, Any, Any, Any]]:
    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()
    files = (
        os.fdopen(read_in, "rb"),
        os.fdopen(write_in, "wb", buffering=0),
        os.fdopen(read_out, "rb"),
        os.fdopen(write_out, "wb", buffering=0),
    )
    yield files
    # The write ends first: a server thread may still be reading the input (a test that
    # failed before ending it), and closing a reader that another thread reads from
    # waits for that read, which only the end of input finishes.
    for file in (files[1], files[3], files[0], files[2]):
        if not file.closed:
            file.close()


def _served(
    plugin: str, *tools: Any, drain_seconds: float = DRAIN_SECONDS, max_requests: int = 128
) -> StdioServer:
    """An in-process stdio server of one plugin's tools, for a registered principal."""
    plugged = contribution(plugin, *tools)
    runtime = compose_runtime([plugged], external_bindings(plugged), server_version="0.1.0")
    dispatcher = Dispatcher(runtime, Governance(Policy(None, runtime)))
    return StdioServer(
        dispatcher,
        StatelessEra(dispatcher),
        principal=registered_principal("t", "t"),
        drain_seconds=drain_seconds,
        max_requests=max_requests,
    )


def test_a_cancelled_request_is_never_answered(pipes: tuple[Any, Any, Any, Any]) -> None:
    source, to_server, from_server, sink = pipes
    started = anyio.Event()

    async def hang(arguments: dict[str, Any]) -> dict[str, Any]:
        started.set()
        await anyio.sleep_forever()
        return structured_result({})

    server = _served("slow", tool("slow", "hang", hang))

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, source, sink)
            to_server.write(_line(INITIALIZE))
            call = {"jsonrpc": "2.0", "id": "slow", "method": "tools/call"}
            to_server.write(_line({**call, "params": {"name": "slow__hang"}}))
            await started.wait()
            cancel = {"requestId": "slow", "reason": "user"}
            to_server.write(
                _line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
            )
            to_server.write(_line({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
            to_server.close()  # end of input: serve returns once nothing runs

    anyio.run(scenario)
    sink.close()
    replies = [json.loads(line) for line in from_server.read().splitlines()]
    assert [reply["id"] for reply in replies] == [1, 2]


def test_a_ping_before_initialize_takes_only_object_params() -> None:
    server = _served("slow", tool("slow", "hold", lambda arguments: structured_result({})))

    async def replies() -> list[dict[str, Any]]:
        return [
            await server._answer(Request(1, "ping", None)),
            await server._answer(Request(2, "ping", {})),
            await server._answer(Request(3, "ping", ["x"])),
        ]

    assert [reply.get("result", reply.get("error")) for reply in anyio.run(replies)] == [
        {},
        {},
        {"code": -32602, "message": "Invalid params"},
    ]


def test_a_request_reusing_the_id_of_one_still_running_is_refused_and_the_first_goes_on(
    pipes: tuple[Any, Any, Any, Any],
) -> None:
    source, to_server, from_server, sink = pipes
    started = anyio.Event()
    release = anyio.Event()

    async def hold(arguments: dict[str, Any]) -> dict[str, Any]:
        started.set()
        await release.wait()
        return structured_result({"released": True})

    server = _served("slow", tool("slow", "hold", hold))
    call = {"jsonrpc": "2.0", "id": "c", "method": "tools/call", "params": {"name": "slow__hold"}}

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, source, sink)
            to_server.write(_line(INITIALIZE))
            to_server.write(_line(call))
            await started.wait()
            to_server.write(_line({"jsonrpc": "2.0", "id": "c", "method": "ping"}))
            for _ in range(2):  # the initialize reply, then the refusal
                replies.append(json.loads(await anyio.to_thread.run_sync(from_server.readline)))
            release.set()
            to_server.close()

    replies: list[dict[str, Any]] = []
    anyio.run(scenario)
    sink.close()
    replies += [json.loads(line) for line in from_server.read().splitlines()]
    assert replies[1] == {
        "jsonrpc": "2.0",
        "id": "c",
        "error": {"code": -32600, "message": REQUEST_ID_IN_USE},
    }
    assert replies[2]["id"] == "c"
    assert replies[2]["result"]["structuredContent"] == {"released": True}


def test_a_request_beyond_the_running_bound_is_refused_and_reading_goes_on(
    pipes: tuple[Any, Any, Any, Any],
) -> None:
    source, to_server, from_server, sink = pipes
    release, third, cancelled = anyio.Event(), anyio.Event(), anyio.Event()
    entered: list[str] = []

    async def hold(arguments: dict[str, Any]) -> dict[str, Any]:
        entered.append(arguments["text"])
        if len(entered) == 3:
            third.set()
        try:
            await release.wait()
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return structured_result({"held": arguments["text"]})

    held = tool("slow", "hold", hold, input_schema=schema(text={"type": "string"}))
    server = _served("slow", held, max_requests=2)
    replies: list[dict[str, Any]] = []

    async def read_reply() -> dict[str, Any]:
        line = await to_thread.run_sync(from_server.readline)
        reply: dict[str, Any] = json.loads(line)
        replies.append(reply)
        return reply

    def call(request_id: int) -> bytes:
        params = {"name": "slow__hold", "arguments": {"text": str(request_id)}}
        return _line({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, source, sink)
            to_server.write(_line(INITIALIZE))
            await read_reply()
            to_server.write(call(2) + call(3) + call(4))
            busy = await read_reply()  # the third, while two are running
            assert busy["id"] == 4
            assert busy["error"]["code"] == -32603
            assert "Too many requests running (at most 2)" in busy["error"]["message"]
            # Reading went on: a cancellation frees a place, and the next call takes it.
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
            to_server.write(_line({**cancel, "params": {"requestId": 2}}))
            await cancelled.wait()
            await anyio.wait_all_tasks_blocked()  # the cancelled request has ended
            to_server.write(call(5))
            await third.wait()
            release.set()
            await read_reply()
            await read_reply()
            to_server.close()

    anyio.run(scenario)
    assert sorted(reply["id"] for reply in replies[2:]) == [3, 5]
    assert entered == ["2", "3", "5"]


# --- stopping while a synchronous handler never returns ----------------------------------


def test_a_cancelled_sync_call_keeps_its_thread_place_until_its_handler_returns() -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(arguments: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        release.wait()
        return structured_result({})

    # The next call is another plugin's: its own plugin's share is not what holds it back.
    slow, other = (
        contribution("slow", tool("slow", "stuck", stuck)),
        contribution("other", tool("other", "quick")),
    )
    registry = compose_runtime(
        [slow, other], external_bindings(slow, other), server_version="0.1.0"
    ).registry
    limits = _WorkerLimits(1, 1)
    hung, quick = registry.get("slow__stuck"), registry.get("other__quick")
    assert hung is not None
    assert quick is not None
    results: list[object] = []

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(limits.run, hung, {})
            await to_thread.run_sync(entered.wait)
            group.cancel_scope.cancel()  # given up on at once, though its thread runs on
        limiter = limits._places(hung)[-1]  # the places of its kind
        assert limiter.borrowed_tokens == 1  # the running handler keeps its place
        async with anyio.create_task_group() as group:

            async def next_call() -> None:
                results.append(await limits.run(quick, {"text": "x"}))

            group.start_soon(next_call)
            await anyio.wait_all_tasks_blocked()
            assert limiter.statistics().tasks_waiting == 1  # no second thread for it
            release.set()  # the first handler returns and gives its place back
        assert limiter.borrowed_tokens == 0

    anyio.run(scenario)
    assert len(results) == 1


def test_one_plugins_hung_handlers_leave_the_other_plugins_thread_places() -> None:
    entered, release = threading.Semaphore(0), threading.Event()

    def stuck(arguments: dict[str, Any]) -> dict[str, Any]:
        entered.release()
        release.wait()
        return structured_result({})

    hanging = contribution("hanging", tool("hanging", "stuck", stuck))
    other = contribution("other", tool("other", "quick"))
    registry = compose_runtime(
        [hanging, other], external_bindings(hanging, other), server_version="0.1.0"
    ).registry
    hung, quick = registry.get("hanging__stuck"), registry.get("other__quick")
    assert hung is not None
    assert quick is not None
    limits = _WorkerLimits(4, 4)  # four read-only places: two for any one plugin
    answered: list[object] = []

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(limits.run, hung, {})
            for _ in range(2):
                await to_thread.run_sync(entered.acquire)
            await anyio.wait_all_tasks_blocked()
            # Two handlers hang in their plugin's two places; the third call waits for one.
            share, kind = limits._places(hung)
            assert share.statistics().tasks_waiting == 1
            assert kind.borrowed_tokens == 2
            # Another plugin's calls still run, in the places left.
            for _ in range(2):
                answered.append(await limits.run(quick, {"text": "x"}))
            release.set()

    anyio.run(scenario)
    assert len(answered) == 2


def test_the_memory_tools_keep_places_however_many_plugins_hang() -> None:
    entered, release = threading.Semaphore(0), threading.Event()

    def stuck(arguments: dict[str, Any]) -> dict[str, Any]:
        entered.release()
        release.wait()
        return structured_result({})

    first = contribution("first", tool("first", "stuck", stuck))
    second = contribution("second", tool("second", "stuck", stuck))
    memory = contribution("mnemosyne", tool("mnemosyne", "recall"))
    plugins = [first, second, memory]
    registry = compose_runtime(
        plugins, external_bindings(*plugins), server_version="0.1.0"
    ).registry
    hung = [registry.get("first__stuck"), registry.get("second__stuck")]
    recall = registry.get("mnemosyne__recall")
    assert recall is not None
    limits = _WorkerLimits(4, 4)  # two plugins' halves fill the external places
    answered: list[object] = []

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            for stuck_tool in hung:
                for _ in range(2):
                    group.start_soon(limits.run, stuck_tool, {})
            for _ in range(4):
                await to_thread.run_sync(entered.acquire)
            assert hung[0] is not None
            assert limits._places(hung[0])[-1].available_tokens == 0
            answered.append(await limits.run(recall, {"text": "x"}))
            release.set()

    anyio.run(scenario)
    assert len(answered) == 1


def test_end_of_input_drops_a_request_whose_handler_never_returns(
    pipes: tuple[Any, Any, Any, Any],
) -> None:
    source, to_server, from_server, sink = pipes
    entered, release = threading.Event(), threading.Event()

    def stuck(arguments: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        release.wait()
        return structured_result({})

    server = _served("slow", tool("slow", "stuck", stuck), drain_seconds=0)

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, source, sink)
            to_server.write(_line(INITIALIZE))
            # The initialize reply is written (a reply being written when the drain
            # ends may be dropped too, which is not what this test is about).
            first = await to_thread.run_sync(from_server.readline)
            assert json.loads(first)["id"] == 1
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
            to_server.write(_line({**call, "params": {"name": "slow__stuck"}}))
            await to_thread.run_sync(entered.wait)
            to_server.close()  # serve returns although the handler still runs

    try:
        anyio.run(scenario)
    finally:
        release.set()
    sink.close()
    assert from_server.read() == b""  # the dropped call is never answered


def test_the_line_bound_counts_the_message_not_its_line_end(
    pipes: tuple[Any, Any, Any, Any],
) -> None:
    source, to_server, from_server, sink = pipes
    server = _served("slow", tool("slow", "hold", lambda arguments: structured_result({})))
    server._max_line = 200

    def ping(request_id: int, size: int) -> bytes:
        message = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping", "pad": ""})
        return message[:-2].encode() + b"x" * (size - len(message)) + b'"}'

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, source, sink)
            for request_id, size, end in [(1, 200, b"\n"), (2, 200, b"\r\n"), (3, 201, b"\r\n")]:
                line = ping(request_id, size)
                assert len(line) == size
                to_server.write(line + end)
            to_server.close()

    anyio.run(scenario)
    sink.close()
    replies = [json.loads(line) for line in from_server.read().splitlines()]
    assert [reply.get("id") for reply in replies] == [1, 2, None]
    assert replies[2]["error"]["message"] == "Message too long"


class _HeldSink:
    """A reply sink whose client reads nothing until `release` (every write waits)."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.lines = bytearray()

    def write(self, data: Any) -> int:
        self.opened.wait()
        self.lines.extend(data)
        return len(data)

    def flush(self) -> None:
        pass

    def release(self) -> None:
        self.opened.set()


def test_a_reply_waiting_to_be_written_counts_against_the_running_bound() -> None:
    # Answered but unread replies are held in memory as running requests are: a client
    # that sends faster than it reads must meet the bound, not fill the process. (Lines
    # are handed over as the read loop would, so that the test knows when each is in.)
    sink = _HeldSink()
    server = _served("slow", tool("slow", "hold", lambda arguments: structured_result({})))
    server._max_requests = 2
    server._sink = sink

    def ping(request_id: int) -> bytes:
        return _line({"jsonrpc": "2.0", "id": request_id, "method": "ping"})

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            await server._receive(_line(INITIALIZE), group)
            await server._receive(ping(2), group)
            await anyio.wait_all_tasks_blocked()  # both answered, both waiting to be written
            group.start_soon(server._receive, ping(3), group)
            await anyio.wait_all_tasks_blocked()
            sink.release()

    anyio.run(scenario)
    replies = {reply["id"]: reply for reply in map(json.loads, sink.lines.splitlines())}
    assert sorted(replies) == [1, 2, 3]
    assert replies[2]["result"] == {}
    assert replies[3]["error"]["code"] == -32603  # refused: two replies were still unread
    assert "Too many requests running (at most 2)" in replies[3]["error"]["message"]


def test_an_id_is_free_again_once_answered_though_its_reply_is_still_being_written() -> None:
    # A client may read a reply and reuse its id before the write has returned here.
    sink = _HeldSink()
    server = _served("slow", tool("slow", "hold", lambda arguments: structured_result({})))
    server._sink = sink
    ping = _line({"jsonrpc": "2.0", "id": 2, "method": "ping"})

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            await server._receive(ping, group)
            await anyio.wait_all_tasks_blocked()  # answered; its reply waits to be written
            await server._receive(ping, group)
            sink.release()

    anyio.run(scenario)
    replies = [json.loads(line) for line in sink.lines.splitlines()]
    assert replies == [{"jsonrpc": "2.0", "id": 2, "result": {}}] * 2


@contextmanager
def _client_input(kind: str) -> Iterator[tuple[Any, Callable[[bytes], None], Callable[[], None]]]:
    """The server's input, with how the client writes to it and how it ends it: a pipe it
    closes, or a socket it shuts for writing (how Node ends a child process's input)."""
    if kind == "pipe":
        read_end, write_end = os.pipe()
        source, sink = os.fdopen(read_end, "rb"), os.fdopen(write_end, "wb", buffering=0)
        try:
            yield source, sink.write, sink.close
        finally:
            sink.close()  # the write end first: a server thread may still be reading
            source.close()
        return
    server_end, client_end = socket.socketpair()
    source = server_end.makefile("rb", buffering=0)
    try:
        yield source, client_end.sendall, lambda: client_end.shutdown(socket.SHUT_WR)
    finally:
        client_end.close()
        source.close()
        server_end.close()


@pytest.mark.parametrize("kind", ["pipe", "socket"])
def test_ending_the_input_ends_serving_while_the_client_reads_no_replies(kind: str) -> None:
    # The read loop writes its own refusals; with nobody reading them it waits, and would
    # never reach the end of input. The client's end of input starts the drain all the
    # same: a pipe says so as a hang-up, a socket shut for writing as a read hang-up.
    sink = _HeldSink()  # never released
    server = _served("slow", tool("slow", "hold", lambda arguments: structured_result({})))
    server._drain_seconds = 0
    with _client_input(kind) as (source, write, end_input):

        async def scenario() -> None:
            with anyio.fail_after(60):  # a guard, not a measure: the defect hangs for good
                async with anyio.create_task_group() as group:
                    group.start_soon(server.serve, source, sink)
                    write(b"not json\n" * 50)
                    await anyio.wait_all_tasks_blocked()  # the first refusal waits
                    end_input()

        try:
            anyio.run(scenario)
            assert sink.lines == b""
        finally:
            sink.release()  # the abandoned write's thread may end now


ASYNC_NOISY_PLUGIN = """
import os


async def _handler(arguments):
    # On the event loop: a write that waits for stderr would stop every request.
    print("noise " * 700)
    os.write(2, b"raw noise " * 200 + b"\\n")
    return structured_result({"ok": True})
"""


LINE_PRINTING_PLUGIN = """
import sys


def _handler(arguments):
    # Block-buffered: flushed in pieces that end mid-line, between the server's log lines.
    for _ in range(40):
        sys.stdout.write("p" * 999 + "\\n")
    return structured_result({"ok": True})
"""


def test_plugin_output_and_log_lines_stay_whole_json_lines(sandbox: Sandbox) -> None:
    plugin_path = sandbox.serve_plugin("noisy", LINE_PRINTING_PLUGIN)
    call = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "noisy__tool_0"}}
    ping = {"jsonrpc": "2.0", "method": "ping"}
    lines = [_line(INITIALIZE)]
    for number in range(2, 42, 2):
        lines += [_line({**call, "id": number}), _line({**ping, "id": number + 1})]
    environment = {**plugin_path, "MYMCP_LOG_FORMAT": "json"}
    replies, stderr, status = _raw(sandbox, lines, environment)
    assert status == 0, stderr
    assert len(replies) == 41
    records = [json.loads(line) for line in stderr.splitlines()]  # every line is one object
    printed = [r["message"] for r in records if r["logger"] == "output"]
    assert printed == ["p" * 999] * (40 * 20)


def test_a_plugin_writing_to_stderr_nobody_reads_never_stops_the_answers(sandbox: Sandbox) -> None:
    plugin_path = sandbox.serve_plugin("noisy", ASYNC_NOISY_PLUGIN)
    count = 100  # about 6 KB of stderr each: ten times what a pipe holds
    process = subprocess.Popen(
        [sys.executable, "-m", "mymcp.cli", "stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,  # never read
        env=sandbox.environ(plugin_path),
    )
    assert process.stdin is not None
    assert process.stdout is not None
    watchdog = threading.Timer(120, process.kill)  # a wedged server fails, not hangs
    watchdog.start()
    try:
        call = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "noisy__tool_0"}}
        process.stdin.write(_line(INITIALIZE))
        for number in range(2, count + 2):
            process.stdin.write(_line({**call, "id": number}))
        process.stdin.flush()
        replies = [json.loads(process.stdout.readline()) for _ in range(count + 1)]
        process.stdin.close()
        status = process.wait(timeout=60)
    finally:
        watchdog.cancel()
        process.kill()
        process.wait()
    assert sorted(reply["id"] for reply in replies) == list(range(1, count + 2))
    assert all(reply["result"]["structuredContent"] == {"ok": True} for reply in replies[1:])
    assert status == 0


STUCK_PLUGIN = """
import sys
import time


def _handler(arguments):
    sys.stderr.write("stuck handler entered\\n")
    sys.stderr.flush()
    time.sleep(3600)  # never returns while anyone waits for it
"""


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_ends_the_process_while_a_handler_never_returns(
    sandbox: Sandbox, stop: signal.Signals
) -> None:
    plugin_path = sandbox.serve_plugin("stuck", STUCK_PLUGIN)
    process = subprocess.Popen(
        [sys.executable, "-m", "mymcp.cli", "stdio", "--log-level", "debug"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=sandbox.environ(plugin_path),
    )
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        process.stdin.write(_line(INITIALIZE))
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 1
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        process.stdin.write(_line({**call, "params": {"name": "stuck__tool_0"}}))
        process.stdin.flush()
        log = b""
        # The dispatcher logs the call before its worker thread starts; a signal in
        # between would cancel a call that never ran, so wait for the handler itself.
        while b"stuck handler entered" not in log:
            line = process.stderr.readline()
            assert line, log.decode()
            log += line
        process.send_signal(stop)
        status = process.wait(timeout=60)
        log += process.stderr.read()
    finally:
        process.kill()
        process.wait()
    text = log.decode()
    assert status == 0, text
    assert "Traceback" not in text, text
    assert "Fatal Python error" not in text, text
    assert "outcome=threads_left_running count=1" in text
    assert "response id=2 method=tools/call outcome=cancelled reason=server_stopping" in text
    assert process.stdout.read() == b""  # the dropped call was never answered


# Runs `mymcp stdio` with a signal sent to itself as serving begins: after the event loop
# started and before serving listens for signals (the window a client's quick restart
# can hit).
_SIGNALLED_AS_SERVING_BEGINS = """
import os, signal, sys
from mymcp.cli.entry import main
from mymcp.transport import StdioServer

serve = StdioServer.serve

async def signalled_first(self, source, sink):
    os.kill(os.getpid(), signal.{name})
    await serve(self, source, sink)

StdioServer.serve = signalled_first
sys.exit(main(["stdio"]))
"""


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_as_serving_begins_stops_the_process_cleanly(
    sandbox: Sandbox, stop: signal.Signals
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _SIGNALLED_AS_SERVING_BEGINS.format(name=stop.name)],
        stdin=subprocess.PIPE,  # left open: only the signal can end serving
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=sandbox.environ(),
    )
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        status = process.wait(timeout=60)
        text = process.stderr.read().decode()
        assert status == 0, text
        assert "Traceback" not in text, text
        assert process.stdout.read() == b""
    finally:
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            stream.close()


def test_with_stderr_closed_the_client_is_served_and_only_replies_reach_its_stdout(
    sandbox: Sandbox,
) -> None:
    # No log can be read then, but the client started it so: it is served, and what
    # would have gone to stderr goes nowhere, never into the replies.
    finished = subprocess.run(
        [sys.executable, "-m", "mymcp.cli", "stdio", "--log-level", "debug"],
        env=sandbox.environ(),
        input=_line(INITIALIZE) + _line({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        stdout=subprocess.PIPE,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.close(2),
    )
    assert finished.returncode == 0
    replies = [json.loads(line) for line in finished.stdout.splitlines()]
    assert [reply["id"] for reply in replies] == [1, 2]
    assert replies[1]["result"] == {}
    # A stderr open for reading only is replaced the same way: every write to it, the
    # print of a plugin at import among them, would fail.
    read_only = subprocess.run(
        [sys.executable, "-m", "mymcp.cli", "stdio"],
        env=sandbox.environ(sandbox.serve_plugin("noisy", NOISY_PLUGIN)),
        input=_line(INITIALIZE),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.dup2(os.open(os.devnull, os.O_RDONLY), 2),
    )
    assert read_only.returncode == 0
    assert [json.loads(line)["id"] for line in read_only.stdout.splitlines()] == [1]
    # Refusals before serving (a usage error, a bad environment) go nowhere too: Python
    # would print them on stdout for want of a stderr.
    for arguments, environment in (
        (["--bogus"], {}),
        ([], {"MYMCP_LOG_LEVEL": "bogus"}),
    ):
        refused = subprocess.run(
            [sys.executable, "-m", "mymcp.cli", "stdio", *arguments],
            env=sandbox.environ(environment),
            input=_line(INITIALIZE),
            stdout=subprocess.PIPE,
            timeout=60,
            check=False,
            preexec_fn=lambda: os.close(2),
        )
        assert refused.returncode != 0
        assert refused.stdout == b"", arguments


@pytest.mark.parametrize("closed", [0, 1])
def test_a_closed_standard_stream_is_one_line_of_error(sandbox: Sandbox, closed: int) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "mymcp.cli", "stdio"],
        env=sandbox.environ(),
        capture_output=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.close(closed),
    )
    assert finished.returncode == 1
    assert finished.stderr.decode().splitlines() == [
        "mymcp: error: MyMCP stdio needs an open standard input and output (code=stdio_unavailable)"
    ]


def test_a_handler_raising_a_cancellation_of_its_own_is_an_error_result(
    pipes: tuple[Any, Any, Any, Any],
) -> None:
    source, to_server, from_server, sink = pipes

    async def cancels(arguments: dict[str, Any]) -> dict[str, Any]:
        raise asyncio.CancelledError  # nobody asked for it: not the request's cancellation

    server = _served("odd", tool("odd", "cancels", cancels))

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, source, sink)
            to_server.write(_line(INITIALIZE))
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
            to_server.write(_line({**call, "params": {"name": "odd__cancels"}}))
            to_server.write(_line({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
            to_server.close()

    anyio.run(scenario)
    sink.close()
    replies = {reply["id"]: reply for reply in map(json.loads, from_server.read().splitlines())}
    assert sorted(replies) == [1, 2, 3]
    assert replies[2]["result"]["structuredContent"]["code"] == "internal_error"


def test_a_reply_larger_than_the_pipe_arrives_whole_even_on_a_non_blocking_pipe() -> None:
    # The client may share a pipe it made non-blocking: each write then takes what the
    # pipe holds (64 KiB) and answers None while it is full. Nothing may be lost.
    from mymcp.transport._stdio import _write_line

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    replies = [json.dumps({"id": n, "text": "x" * 300_000}).encode() for n in range(2)]
    received = bytearray()

    def drain() -> None:
        with os.fdopen(read_end, "rb") as source:
            while chunk := source.read(4096):
                received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    with os.fdopen(write_end, "wb", buffering=0) as sink:
        for reply in replies:
            _write_line(sink, reply)
    reader.join(timeout=60)
    assert bytes(received).split(b"\n") == [*replies, b""]


def test_a_signal_ends_the_process_while_its_client_reads_no_replies(sandbox: Sandbox) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "mymcp.cli", "stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,  # never read: the replies fill the pipe, then writes wait
        stderr=subprocess.PIPE,
        env=sandbox.environ(),
    )
    assert process.stdin is not None
    assert process.stderr is not None
    try:
        process.stdin.write(_line(INITIALIZE))
        listing = {"jsonrpc": "2.0", "method": "tools/list"}
        for number in range(2, 40):  # each list is kilobytes: far more than a pipe holds
            process.stdin.write(_line({**listing, "id": number}))
        process.stdin.flush()
        log = b""
        while b"response id=39 " not in log:  # every reply is made; most wait to be written
            line = process.stderr.readline()
            assert line, log.decode()
            log += line
        process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=60)
        log += process.stderr.read()
    finally:
        process.kill()
        process.wait()
    text = log.decode()
    assert status == 0, text
    assert "Traceback" not in text
    assert "outcome=threads_left_running count=1" in text  # the abandoned write


def test_a_client_that_never_reads_stderr_is_still_answered_and_can_stop_it(
    sandbox: Sandbox,
) -> None:
    # Two log lines per request: a thousand requests write far more than a pipe holds.
    count = 1000
    process = subprocess.Popen(
        [sys.executable, "-m", "mymcp.cli", "stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,  # never read
        env=sandbox.environ(),
    )
    assert process.stdin is not None
    assert process.stdout is not None
    watchdog = threading.Timer(60, process.kill)  # a server stuck on stderr fails, not hangs
    watchdog.start()
    try:
        process.stdin.write(_line(INITIALIZE))
        pings = b"".join(
            _line({"jsonrpc": "2.0", "id": n, "method": "ping"}) for n in range(2, count + 2)
        )
        feeding = threading.Thread(
            target=lambda: (process.stdin.write(pings), process.stdin.flush())
        )
        feeding.start()
        answered = {json.loads(process.stdout.readline())["id"] for _ in range(count + 1)}
        feeding.join(timeout=60)
        process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=60)
    finally:
        watchdog.cancel()
        process.kill()
        process.wait()
    assert answered == set(range(1, count + 2))
    assert status == 0


def _pending_bytes(descriptor: int) -> int:
    return int.from_bytes(
        fcntl.ioctl(descriptor, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder, signed=True
    )


def test_a_non_blocking_input_is_waited_on_not_read_as_ended() -> None:
    # A client may hand over a pipe it made non-blocking: a read then answers only what
    # has arrived, a piece of a line or nothing, and neither is the end of input.
    from mymcp.transport._stdio import _LineReader

    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    ping = _line({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    read: list[bytes] = []
    with os.fdopen(read_end, "rb") as source, os.fdopen(write_end, "wb", buffering=0) as sink:
        reader = _LineReader(source, 1 << 20)
        sink.write(ping[:10])
        thread = threading.Thread(target=lambda: read.append(reader._readline(1 << 20)))
        thread.start()
        while _pending_bytes(read_end) and thread.is_alive():
            pass  # until the half line has been taken from the pipe
        sink.write(ping[10:])
        sink.write(b"and no end")
        sink.close()  # the rest of the input, then its end
        thread.join(30)
        assert read == [ping]
        assert reader._readline(1 << 20) == b"and no end"  # a last line without its end
        assert reader._readline(1 << 20) == b""


class _FullSink:
    """A standard output on a full disk: every write fails."""

    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        pass


def test_output_that_cannot_be_written_is_logged_once(
    pipes: tuple[Any, Any, Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    source, to_server, _, _ = pipes
    server = _served("odd", tool("odd", "quick"))

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, source, _FullSink())
            for number in (1, 2, 3):
                to_server.write(_line({"jsonrpc": "2.0", "id": number, "method": "ping"}))
            to_server.close()

    with caplog.at_level(logging.INFO, logger="mcp"):
        anyio.run(scenario)
    said = [r.getMessage() for r in caplog.records if r.name == "mcp"]
    assert said.count("output outcome=unwritable reason=ENOSPC") == 1
    assert sum(line.startswith("response id=") for line in said) == 3  # all made, none lost

"""A server that cannot listen says so in one coded line and leaves nothing behind.

Each case occupies the configured address in the test, starts the real `mymcp`, and
reads what the operator would: the exit status, the one `mymcp: error:` line naming the
address, the cause and the configuration key, and an untouched home directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from mymcp.cli.terminal import EXIT_FAILURE, EXIT_INTERRUPTED
from tests.e2e.server import MYMCP, READY_MARKER, Sandbox, log_and_errors, run_cli

CLI_TIMEOUT = 30.0


@contextmanager
def _occupied(address: str, port: int) -> Iterator[None]:
    """Another process's server on `address` and `port` for the length of the block."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        listener = socket.create_server((address, port), family=family)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        yield  # already someone else's: the server cannot listen there either
        return
    with listener:
        yield


def _refused(sandbox: Sandbox) -> tuple[subprocess.CompletedProcess[str], list[str], list[str]]:
    result = run_cli([], sandbox.environ(), timeout=CLI_TIMEOUT)
    log, errors = log_and_errors(result.stderr)
    assert result.returncode == EXIT_FAILURE, result.stderr
    assert result.stdout == ""
    # uvicorn never got as far as trying: no raw bind error, no traceback, no start.
    assert "Errno" not in result.stderr
    assert "Traceback" not in result.stderr
    assert "uvicorn" not in result.stderr
    # Log lines are content-free: the code, never the file.
    assert str(sandbox.root) not in "\n".join(log)
    return result, log, errors


MYMCP_DEV = str(Path(MYMCP).with_name("mymcp-dev"))


def _mymcp_dev(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MYMCP_DEV],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_a_taken_port_stops_the_start_with_one_coded_line_and_writes_nothing(
    sandbox: Sandbox,
) -> None:
    # Schema 8 audits by default: a start that got further would create the audit log.
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table())
    with _occupied("127.0.0.1", sandbox.port):
        _, log, errors = _refused(sandbox)
    assert errors == [
        f"mymcp: error: {sandbox.config_file}:4:1: server.port: MyMCP cannot listen: the "
        f"address and port are already in use: 127.0.0.1:{sandbox.port} is taken by another "
        "process (another MyMCP?); stop it, or set another port (code=address_in_use)"
    ]
    # The configuration was read (that is how the port is known); nothing after it ran.
    assert [line.split(" ", 2)[2] for line in log] == [
        "mymcp.host.configuration host_configuration outcome=loaded schema_version=8 "
        f"address=127.0.0.1 port={sandbox.port} declarations=0 enabled=0",
        "mymcp.host.listen listen outcome=error code=address_in_use "
        f"address=127.0.0.1 port={sandbox.port}",
    ]
    assert not (sandbox.home / ".local" / "state" / "mymcp" / "audit").exists()
    assert list(sandbox.home.iterdir()) == []


def test_mymcp_dev_names_a_taken_port_as_mymcp_does(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table())
    with _occupied("127.0.0.1", sandbox.port):
        result = _mymcp_dev(sandbox.environ())
    _, errors = log_and_errors(result.stderr)
    assert result.returncode == EXIT_FAILURE, result.stderr
    assert "Errno" not in result.stderr
    assert errors == [
        f"mymcp: error: {sandbox.config_file}:4:1: server.port: MyMCP cannot listen: the "
        f"address and port are already in use: 127.0.0.1:{sandbox.port} is taken by another "
        "process (another MyMCP?); stop it, or set another port (code=address_in_use)"
    ]
    assert list(sandbox.home.iterdir()) == []


def test_mymcp_dev_stops_with_one_coded_line_when_a_plugin_fails_to_import(
    sandbox: Sandbox,
) -> None:
    # Found in the reload worker only, the failure would be a traceback and a reloader
    # left waiting for a change.
    result = _mymcp_dev(
        sandbox.environ(sandbox.serve_plugin("broken", 'raise RuntimeError("boom")'))
    )
    _, errors = log_and_errors(result.stderr)
    assert result.returncode == EXIT_FAILURE, result.stderr
    assert "Traceback" not in result.stderr
    assert "Uvicorn running" not in result.stderr
    (error,) = errors
    assert error.startswith("mymcp: error: plugin broken")
    assert error.endswith("(code=external_plugin_import_failed)")


def test_mymcp_dev_ends_on_ctrl_c_though_a_plugin_left_a_thread_running(sandbox: Sandbox) -> None:
    # Its check imports the plugins in the launcher too: a thread one of them started at
    # import, which never ends, must not keep the launcher alive once the reloader stops.
    poller = "import threading\nthreading.Thread(target=threading.Event().wait).start()\n"
    process = subprocess.Popen(
        [MYMCP_DEV],
        env=sandbox.environ(sandbox.serve_plugin("poller", poller)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:  # ends when the process does: no sleeping
            if "Application startup complete" in line:
                break
        os.killpg(process.pid, signal.SIGINT)
        status = process.wait(timeout=CLI_TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert status == 0


def test_mymcp_dev_ends_on_a_ctrl_c_while_a_plugin_imports_for_its_check(sandbox: Sandbox) -> None:
    # The person presses Ctrl-C while the check imports a plugin (here the plugin sends
    # it to itself, after starting a thread that never ends): the launcher stops with
    # the status of an interrupt, no traceback, and without waiting for the thread.
    interrupted = (
        "import os, signal, threading\n"
        "threading.Thread(target=threading.Event().wait).start()\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
    )
    result = _mymcp_dev(sandbox.environ(sandbox.serve_plugin("stopped", interrupted)))
    assert result.returncode == EXIT_INTERRUPTED, result.stderr
    assert "Traceback" not in result.stderr
    assert "Uvicorn running" not in result.stderr


def test_a_taken_default_port_is_named_as_the_default(sandbox: Sandbox) -> None:
    # 127.0.0.2 keeps the default port 8000 of this test clear of any real server.
    sandbox.write_config('schema_version = 1\n[server]\naddress = "127.0.0.2"\n')
    with _occupied("127.0.0.2", 8000):
        _, _, errors = _refused(sandbox)
    assert errors == [
        f"mymcp: error: {sandbox.config_file}: MyMCP cannot listen: the address and port are "
        "already in use: 127.0.0.2:8000 is taken by another process (another MyMCP?); stop "
        "it, or set another port with [server] port in this file (it is not set there, so "
        "the default 8000 applies) (code=address_in_use)"
    ]
    assert list(sandbox.home.iterdir()) == []


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_a_taken_ipv6_port_is_named_in_brackets(sandbox: Sandbox) -> None:
    sandbox.write_config(f'schema_version = 1\n[server]\nport = {sandbox.port}\naddress = "::1"\n')
    with _occupied("::1", sandbox.port):
        _, _, errors = _refused(sandbox)
    assert errors == [
        f"mymcp: error: {sandbox.config_file}:3:1: server.port: MyMCP cannot listen: the "
        f"address and port are already in use: [::1]:{sandbox.port} is taken by another "
        "process (another MyMCP?); stop it, or set another port (code=address_in_use)"
    ]


def test_a_free_port_is_announced_served_and_released_on_ctrl_c(sandbox: Sandbox) -> None:
    # The socket is bound before uvicorn starts, so the announcement is made for it; an
    # interrupt still ends the server gracefully, with status 0.
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table())
    process = subprocess.Popen(
        [MYMCP],
        env=sandbox.environ(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stderr is not None
        lines: list[str] = []
        for line in process.stderr:
            lines.append(line)
            if READY_MARKER in line:
                break
        announced = lines[-1].rstrip() if lines else ""
        assert announced.endswith(
            f"INFO uvicorn.error Uvicorn running on http://127.0.0.1:{sandbox.port} "
            "(Press CTRL+C to quit)"
        ), "".join(lines)
        answer = httpx.get(f"http://127.0.0.1:{sandbox.port}/mcp", timeout=10)
        assert answer.status_code < 500
        process.send_signal(signal.SIGINT)
        rest = process.stderr.read()
        status = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert status == 0, rest
    assert "Traceback" not in rest
    assert "INFO uvicorn.error Finished server process" in rest
    with socket.create_server(("127.0.0.1", sandbox.port)):
        pass  # released: anyone may listen there now

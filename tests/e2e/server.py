"""Start the real `mymcp` server (uvicorn) on a free loopback port for end-to-end tests."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

READY_MARKER = "Uvicorn running on"
STARTUP_TIMEOUT = 30.0
MYMCP = str(Path(sys.executable).with_name("mymcp"))
"""The installed `mymcp` console script: tests run the real entry point."""


def _own_ports() -> Iterator[int]:
    """The ports this process hands out, endlessly: from below the kernel's ephemeral
    range, which it never assigns on its own (to a port-0 bind, or to the client end of
    a connection), split between the suite's parallel workers so that no two share one.
    A port from `bind(0)` could be handed again, or taken by a connection, before the
    server started on it binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as ranges:
            ephemeral = int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    first = 10000
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    span = (ephemeral - first) // workers
    if span < 100:  # an unusual range leaves no room: let the kernel choose
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("127.0.0.1", 0))
                yield int(probe.getsockname()[1])
    low = first + index * span
    # Another run of the suite on this machine starts elsewhere in the slice.
    offset = random.randrange(span)
    while True:
        for step in range(span):
            yield low + (offset + step) % span


_PORTS = _own_ports()


def free_port() -> int:
    """A loopback port nothing is bound to (see `_own_ports`)."""
    for port in _PORTS:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("unreachable: the ports never run out")


def port_is_bound(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Sandbox:
    """A private HOME and XDG config directory, so no test touches the real user's files."""

    root: Path
    port: int = field(default_factory=free_port)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def config_file(self) -> Path:
        return self.root / "xdg" / "mymcp" / "config.toml"

    @property
    def memory_root(self) -> Path:
        return self.home / ".mnemosyne" / "memory"

    def file_id(self, parts: tuple[str, ...]) -> str:
        """The id the server's log and `mymcp memory check` name a memory file by here:
        keyed by the key in this home's cache directory."""
        from mymcp.plugins.mnemosyne.memory import file_id, file_key

        return file_id(parts, file_key(self.home / ".cache" / "mymcp"))

    def environ(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("MNEMOSYNE_", "XDG_"))
        }
        env.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.root / "xdg"))
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra or {})
        return env

    def write_config(self, body: str) -> None:
        self.config_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.config_file.write_text(body, encoding="utf-8")

    def server_table(self) -> str:
        return f'[server]\naddress = "127.0.0.1"\nport = {self.port}\n'

    def serve_plugin(self, plugin_id: str, code: str) -> dict[str, str]:
        """Declare one enabled plugin whose module also runs `code` (as in
        `Workspace.plugin`); the environment under which its module imports."""
        from tests.runtime.test_external import Workspace  # only its users import it

        space = Workspace(self.root / "plugin-workspace")
        (space.root / "modules").mkdir(parents=True, exist_ok=True)
        declaration = space.plugin(plugin_id, extra=code)
        self.write_config(
            self.plugin_config(plugin_id, declaration.manifest_path, declaration.module)
        )
        return {"PYTHONPATH": str(space.root / "modules")}

    def plugin_config(self, plugin_id: str, manifest: Path | None, module: str | None) -> str:
        """A schema-2 configuration serving one external plugin on this sandbox's port."""
        return (
            "schema_version = 2\n"
            + self.server_table()
            + f'[[plugins]]\nid = "{plugin_id}"\nenabled = true\n'
            + f'manifest_path = "{manifest}"\nmodule = "{module}"\n'
        )


def make_sandbox(tmp_path: Path) -> Sandbox:
    sandbox = Sandbox(tmp_path)
    sandbox.home.mkdir(mode=0o700)
    return sandbox


@dataclass
class RunningServer:
    url: str
    port: int
    process: subprocess.Popen[str]
    output: list[str]


def run_cli(
    args: list[str], env: Mapping[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a `mymcp` command to completion (it must never serve)."""
    return subprocess.run(
        [MYMCP, *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


ERROR_PREFIX = "mymcp: error: "


def log_and_errors(stderr: str) -> tuple[list[str], list[str]]:
    """A command's stderr split into log lines (content-free by design) and the
    `mymcp: error:` lines meant for the operator, which name the fault in full."""
    lines = stderr.splitlines()
    errors = [line for line in lines if line.startswith(ERROR_PREFIX)]
    return [line for line in lines if not line.startswith(ERROR_PREFIX)], errors


@contextmanager
def serve(
    sandbox: Sandbox, extra_env: Mapping[str, str] | None = None, *, stdout_closed: bool = False
) -> Iterator[RunningServer]:
    """Run `mymcp` until the block ends; fail loudly if it never becomes ready. With
    `stdout_closed`, it starts with descriptor 1 closed (as a service manager may start
    it), and only its stderr is read."""
    process = subprocess.Popen(
        [MYMCP],
        env=sandbox.environ(extra_env),
        stdout=None if stdout_closed else subprocess.PIPE,
        stderr=subprocess.PIPE if stdout_closed else subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=(lambda: os.close(1)) if stdout_closed else None,
    )
    output: list[str] = []
    ready = threading.Event()
    stream = process.stderr if stdout_closed else process.stdout

    def pump() -> None:
        assert stream is not None
        for line in stream:
            output.append(line)
            if READY_MARKER in line:
                ready.set()
        ready.set()  # the process ended: stop waiting either way

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        ready.wait(STARTUP_TIMEOUT)
        if process.poll() is not None or not any(READY_MARKER in line for line in output):
            raise RuntimeError("mymcp did not start:\n" + "".join(output))
        yield RunningServer(f"http://127.0.0.1:{sandbox.port}/mcp", sandbox.port, process, output)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
        reader.join(timeout=15)

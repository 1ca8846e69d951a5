"""Node 22 and the official TypeScript MCP clients, installed for end-to-end tests.

Like `scripts/conformance`, the test setup installs pinned packages from the npm registry
into a cache (default `.cache/node-clients` in the repository, or `MYMCP_NODE_CACHE`):
the `node-linux-<arch>` package that ships a Node 22 binary, the TypeScript SDK client
(`@modelcontextprotocol/client`, v2: the line that speaks 2026-07-28) and the MCP
Inspector CLI. A cache that matches the pins is reused without any network. Tests that
need them skip, naming the reason, only when npm or the registry is unavailable.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NODE_VERSION = "22.23.5"
CLIENT_VERSION = "2.4.0"
INSPECTOR_VERSION = "2.12.0"
PROBE = Path(__file__).with_name("ts_client_probe.mjs")


@dataclass(frozen=True)
class NodeClients:
    root: Path

    @property
    def node(self) -> Path:
        return self.root / "node_modules" / _node_package() / "bin" / "node"

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) with this Node first on PATH."""
        source = os.environ if base is None else base
        env = {k: v for k, v in source.items() if not k.startswith(("NODE_", "npm_"))}
        env["PATH"] = f"{self.node.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return env

    def probe(
        self,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float = 90,
        script: Path = PROBE,
    ) -> subprocess.CompletedProcess[str]:
        """Run a TypeScript client script (default: the probe), copied next to its
        node_modules; a stdio server it starts inherits `env`."""
        copied = self.root / script.name
        shutil.copyfile(script, copied)
        return self._run([str(self.node), str(copied), *args], env, timeout)

    def inspector(
        self, args: Sequence[str], timeout: float = 90
    ) -> subprocess.CompletedProcess[str]:
        cli = self.root / "node_modules" / ".bin" / "mcp-inspector"
        return self._run([str(cli), "--cli", *args], None, timeout)

    def _run(
        self, command: list[str], env: Mapping[str, str] | None, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command,
            env=self.environ(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd=self.root,
        )


def _node_package() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine)
    if arch is None:
        pytest.skip(f"no Node package for machine type {machine}")
    return f"node-linux-{arch}"


def node_clients() -> NodeClients:
    """The installed clients, installing them first if the cache does not match the pins."""
    root = Path(os.environ.get("MYMCP_NODE_CACHE", REPO / ".cache" / "node-clients"))
    wanted = [
        f"{_node_package()}@{NODE_VERSION}",
        f"@modelcontextprotocol/client@{CLIENT_VERSION}",
        f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}",
    ]
    clients = NodeClients(root)
    stamp = root / "installed.txt"
    if stamp.is_file() and stamp.read_text().split() == wanted and clients.node.is_file():
        return clients
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed, so the TypeScript clients cannot be installed")
    root.mkdir(parents=True, exist_ok=True)
    (root / "package.json").write_text('{"name": "mymcp-node-clients", "private": true}\n')
    options = ["--ignore-scripts", "--no-audit", "--no-fund", "--save-exact", "--loglevel=error"]
    options += ["--fetch-retries=1", "--fetch-timeout=30000"]  # an unreachable registry: skip soon
    installed = subprocess.run(
        [npm, "install", "--prefix", str(root), *options, *wanted],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if installed.returncode != 0 or not clients.node.is_file():
        lines = installed.stderr.strip().splitlines() or ["no output"]
        cause = next((line for line in lines if "log of this run" not in line), lines[0])
        pytest.skip(
            f"npm could not install the TypeScript clients (registry unavailable?): {cause}"
        )
    stamp.write_text(" ".join(wanted) + "\n")
    return clients

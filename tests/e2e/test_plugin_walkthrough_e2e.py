"""The plugin walkthrough in docs/PLUGINS.md, run as written: every file it says to save
is saved, every command is run with the real `mymcp`, and the output must be the one the
document shows (timestamps aside, and with this sandbox as the home directory)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.e2e.server import Sandbox, serve

REPO = Path(__file__).resolve().parents[2]
DOCUMENT = REPO / "docs" / "PLUGINS.md"
DOCUMENTED_HOME = "/home/me"
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
SAVE = re.compile(r"Save this as `([^`]+)`")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)

pytestmark = pytest.mark.slow


def _steps() -> list[tuple[str, str, str]]:
    """("file", path, content) and ("console", commands-and-output, "") in document order."""
    text = DOCUMENT.read_text(encoding="utf-8")
    section = text.split("<!-- walkthrough:start -->")[1].split("<!-- walkthrough:end -->")[0]
    steps: list[tuple[str, str, str]] = []
    position = 0
    for fence in FENCE.finditer(section):
        before = section[position : fence.start()]
        position = fence.end()
        if fence[1] == "console":
            steps.append(("console", fence[2], ""))
            continue
        saved = SAVE.findall(before)
        assert saved, f"a {fence[1]} block without 'Save this as': {fence[2][:60]!r}"
        steps.append(("file", saved[-1], fence[2]))
    return steps


def _commands(block: str) -> list[tuple[str, list[str]]]:
    commands: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            commands[-1][1].append(line)
    return commands


def _normalized(lines: list[str], home: Path) -> list[str]:
    return [STAMP.sub("<time>", line.replace(str(home), DOCUMENTED_HOME)) for line in lines]


def test_the_walkthrough_works_as_written(sandbox: Sandbox) -> None:
    home = sandbox.home
    environment = {
        "HOME": str(home),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "PYTHONUNBUFFERED": "1",
        "LANG": "C.UTF-8",
    }
    steps = _steps()
    assert [kind for kind, _, _ in steps].count("console") >= 3
    for kind, first, second in steps:
        if kind == "file":
            path = Path(first.replace("~", str(home), 1))
            path.write_text(second.replace(DOCUMENTED_HOME, str(home)), encoding="utf-8")
            continue
        for command, expected in _commands(first):
            ran = subprocess.run(
                ["bash", "-c", command],
                env=environment,
                cwd=home,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=120,
                check=False,
            )
            assert ran.returncode == 0, (command, ran.stdout)
            assert _normalized(ran.stdout.splitlines(), home) == _normalized(expected, home), (
                command
            )
    # The end state: the server publishes the tool, configured as the walkthrough says.
    config = home / ".config" / "mymcp" / "config.toml"
    config.write_text(config.read_text() + sandbox.server_table(), encoding="utf-8")
    extra = {
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PYTHONPATH": str(home / "plugins" / "greeter"),
    }
    with serve(sandbox, extra) as server:
        assert anyio.run(_greet, server.url) == {"text": "Good morning, Ada!"}


async def _greet(url: str) -> object:
    async with Client(url) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert "greeter__greet" in names
        return (await client.call_tool("greeter__greet", {"name": "Ada"})).structured_content

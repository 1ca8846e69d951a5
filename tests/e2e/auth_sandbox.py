"""Sandbox set-up for the authentication end-to-end tests: configs and CLI-made tokens."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tests.e2e.server import Sandbox, run_cli

__all__ = [
    "CLI_TIMEOUT",
    "MCP_TABLE",
    "TOKEN",
    "bearer_config",
    "create_token",
    "credential_id",
    "secret_of",
    "verifier_location",
]

MCP_TABLE = (
    "\n[mcp]\nstrict_protocol_version = true\n"
    "session_inactivity_timeout_seconds = 1800\n"
    "session_absolute_lifetime_seconds = 28800\n"
)
TOKEN = re.compile(r"mymcp1\.([0-9a-f]{32})\.([A-Za-z0-9_-]{43})")
CLI_TIMEOUT = 30


def verifier_location(sandbox: Sandbox) -> Path:
    """Where the verifier file goes: a private (0700) directory inside the sandbox."""
    directory = sandbox.root / "credentials"
    directory.mkdir(mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)  # independent of the umask
    return directory / "operator-bearer.json"


def bearer_config(sandbox: Sandbox, verifier: Path, plugins: str = "") -> str:
    return (
        "schema_version = 7\n"
        + sandbox.server_table()
        + plugins
        + "\n[authentication]\nanonymous_enabled = false\n"
        + "\n[[authentication.adapters]]\n"
        + 'id = "local-operator"\ntype = "operator-bearer-v1"\nenabled = true\n'
        + 'route = { source = "authorization", scheme = "bearer" }\n'
        + f"\n[authentication.operator_bearer]\nverifier_path = {json.dumps(str(verifier))}\n"
        + MCP_TABLE
    )


def create_token(sandbox: Sandbox, subject: str, env: dict[str, str] | None = None) -> str:
    created = run_cli(
        ["auth", "token", "create", "--subject", subject],
        env or sandbox.environ(),
        timeout=CLI_TIMEOUT,
    )
    assert created.returncode == 0, created.stderr
    lines = created.stdout.splitlines()
    assert len(lines) == 1, "the token is the only thing printed on stdout"
    assert TOKEN.fullmatch(lines[0])
    assert secret_of(lines[0]) not in created.stderr
    return lines[0]


def credential_id(token: str) -> str:
    match = TOKEN.fullmatch(token)
    assert match is not None
    return match.group(1)


def secret_of(token: str) -> str:
    match = TOKEN.fullmatch(token)
    assert match is not None
    return match.group(2)

"""The real host (Mnemosyne, policy, approvals, audit) with the console, driven in-process.

The console's clock is injected, so that token and session expiry are tested without
waiting; sign-in tokens are issued with the library call `mymcp console` makes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from mymcp.app import create_app
from mymcp.auth import CONSOLE
from mymcp.console import issue_sign_in
from mymcp.governance import Approvals, Governance
from mymcp.host import Host, build_host
from mymcp.transport import Caller, Dispatcher
from tests.transport.conftest import initialize, rpc, session_headers

BASE = "http://127.0.0.1:8000"
ORIGIN = {"origin": BASE}
GATES = {
    "MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "true",
    "MNEMOSYNE_MEMORY_ARCHIVE_RESTORE_ENABLED": "true",
    "MNEMOSYNE_MEMORY_REVISE_ENABLED": "true",
    "MNEMOSYNE_MEMORY_FORGET_ENABLED": "true",
}
CONFIG = """schema_version = 8
[server]
address = "127.0.0.1"
port = 8000
[authentication]
anonymous_enabled = true
[approval]
tools = ["@consent_required"]
"""
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Clock:
    now: float = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Stack:
    client: TestClient
    host: Host
    clock: Clock
    state: Path
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @contextmanager
    def another_browser(self) -> Iterator[TestClient]:
        """A second client of the same app, with its own cookies (no second lifespan)."""
        client = TestClient(self.client.app, base_url=BASE)
        try:
            yield client
        finally:
            client.close()

    def sign_in(self, client: TestClient | None = None) -> str:
        """Sign `client` in with a fresh one-time link; its CSRF token."""
        client = client or self.client
        token = issue_sign_in(self.state, now=self.clock())
        response = client.get(f"/console/sign-in?token={token}")
        assert response.status_code == 200, response.text
        return csrf_of(response.text)

    def post(self, path: str, data: dict[str, str], headers: dict[str, str] | None = None) -> Any:
        return self.client.post(
            path, data=data, headers=ORIGIN if headers is None else headers, follow_redirects=False
        )

    def remember(self, title: str, **overrides: Any) -> dict[str, Any]:
        """Store one record through the real tool (as the console principal)."""
        payload = self.run("memory_remember", remember_arguments(title, **overrides))
        assert payload["status"] == "remembered", payload
        return dict(payload["reference"])

    def run(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        dispatcher = Dispatcher(self.host.runtime, None)
        bound = self.host.runtime.registry.get(tool)
        assert bound is not None
        result = anyio.run(dispatcher.execute, Caller(CONSOLE), bound, arguments)
        return dict(result["structuredContent"])

    def mcp_session(self) -> str:
        return initialize(self.client)

    def mcp_call(self, session: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post(
            "/mcp",
            json=rpc("tools/call", {"name": tool, "arguments": arguments}),
            headers=session_headers(session),
        )
        assert response.status_code == 200, response.text
        return dict(response.json()["result"])


def remember_arguments(title: str, **overrides: Any) -> dict[str, Any]:
    """Valid `memory_remember` arguments for a project decision titled `title`."""
    return {
        "scope": "project",
        "namespace": {"kind": "project", "id": "mnemosyne", "label": "Mnemosyne"},
        "collection": {"id": "decisions", "label": "Decisions"},
        "kind": "decision",
        "language": "en",
        "title": title,
        "content": f"The content of {title}",
        "tags": ["console"],
        "origin": "user_approved_proposal",
        **overrides,
    }


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None, "no CSRF token on the page"
    return found.group(1)


def environment(root: Path, config: str = CONFIG) -> dict[str, str]:
    home, xdg = root / "home", root / "xdg"
    home.mkdir(mode=0o700, exist_ok=True)
    (xdg / "mymcp").mkdir(parents=True, exist_ok=True, mode=0o700)
    (xdg / "mymcp" / "config.toml").write_text(config, encoding="utf-8")
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}


@contextmanager
def running(
    root: Path, *, config: str = CONFIG, gates: dict[str, str] | None = None
) -> Iterator[Stack]:
    """The app over a host built from `config` and the memory `gates`, with one clock for
    the console and the approvals."""
    env = {**environment(root, config), **(GATES if gates is None else gates)}
    host = build_host(env)
    clock = Clock()
    governance = host.governance
    if governance.approvals is not None:
        approvals = Approvals(
            governance.approvals.required,
            governance.approvals.ttl_seconds,
            audit=governance.audit,
            clock=clock,
        )
        governance = Governance(governance.policy, governance.audit, approvals)
        host = replace(host, governance=governance)
    state = root / "state" / "mymcp" / "console"
    app = create_app(
        host.runtime,
        authenticator=host.authenticator,
        configuration=host.configuration,
        governance=governance,
        console_directory=state,
        console_clock=clock,
    )
    with TestClient(app, base_url=BASE) as client:
        yield Stack(client, host, clock, state, root, env)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with running(tmp_path) as running_stack:
        yield running_stack

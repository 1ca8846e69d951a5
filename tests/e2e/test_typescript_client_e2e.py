"""The official TypeScript SDK client and the MCP Inspector CLI against the real server.

Both connect in both protocol eras: the TypeScript client's `auto` negotiation adopts
2026-07-28 through `server/discover`, its `legacy` mode performs the 2025-11-25
handshake; the Inspector is driven with `--protocol-era modern`. The server requires an
operator token and filters tools by policy, so authentication and policy are exercised
by a second client implementation too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.auth_sandbox import bearer_config, create_token, verifier_location
from tests.e2e.node_clients import NodeClients, node_clients
from tests.e2e.server import RunningServer, Sandbox, serve

pytestmark = pytest.mark.slow

POLICY = """
[policy]
default = "deny"

[[policy.rules]]
principals = ["operator:alice"]
allow = ["memory_recall"]

[[policy.rules]]
principals = ["local"]
allow = ["memory_*"]
"""
ERAS = [("auto", "2026-07-28", "modern"), ("legacy", "2025-11-25", "legacy")]


@pytest.fixture(scope="module")
def clients() -> NodeClients:
    return node_clients()


@pytest.fixture
def governed(sandbox: Sandbox) -> Iterator[tuple[RunningServer, str]]:
    verifier = verifier_location(sandbox)
    config = bearer_config(sandbox, verifier).replace("schema_version = 7", "schema_version = 8")
    sandbox.write_config(config + POLICY)
    token = create_token(sandbox, "alice")
    with serve(sandbox) as server:
        yield server, token


def _outcome(finished: Any) -> dict[str, Any]:
    assert finished.returncode == 0, finished.stderr
    return dict(json.loads(finished.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(("mode", "revision", "era"), ERAS)
def test_typescript_client_over_http_with_token_and_policy(
    clients: NodeClients, governed: tuple[RunningServer, str], mode: str, revision: str, era: str
) -> None:
    server, token = governed
    outcome = _outcome(clients.probe(["http", server.url, mode, token]))
    assert (outcome["version"], outcome["era"]) == (revision, era)
    assert outcome["names"] == ["list_tools", "memory_recall"]
    assert outcome["isError"] is False
    assert outcome["structured"]["tools"] == ["list_tools", "memory_recall"]


def test_typescript_client_without_a_token_is_refused(
    clients: NodeClients, governed: tuple[RunningServer, str]
) -> None:
    server, _ = governed
    refused = clients.probe(["http", server.url, "auto"])
    assert refused.returncode != 0
    assert not any("memory_recall" in line for line in server.output)


@pytest.mark.parametrize(("mode", "revision", "era"), ERAS)
def test_typescript_client_over_stdio(
    clients: NodeClients, sandbox: Sandbox, mode: str, revision: str, era: str
) -> None:
    sandbox.write_config("schema_version = 8\n[audit]\nenabled = false\n" + POLICY)
    command = [sys.executable, "-m", "mymcp.cli", "stdio"]
    outcome = _outcome(clients.probe(["stdio", mode, *command], env=sandbox.environ()))
    assert (outcome["version"], outcome["era"]) == (revision, era)
    # Policy as the principal `local`: every memory tool, nothing else.
    assert outcome["names"] == ["list_tools", "memory_recall", "memory_list", "memory_inspect"]


def test_inspector_cli_in_the_modern_era(
    clients: NodeClients, governed: tuple[RunningServer, str]
) -> None:
    server, token = governed
    common = [server.url, "--transport", "http", "--protocol-era", "modern"]
    common += ["--header", f"Authorization: Bearer {token}", "--format", "json"]
    listed = clients.inspector([*common, "--method", "tools/list"])
    assert listed.returncode == 0, listed.stderr
    names = [tool["name"] for tool in json.loads(listed.stdout)["result"]["tools"]]
    assert names == ["list_tools", "memory_recall"]
    called = clients.inspector([*common, "--method", "tools/call", "--tool-name", "list_tools"])
    assert called.returncode == 0, called.stderr
    result = json.loads(called.stdout)["result"]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "mymcp"
    assert result["structuredContent"]["tools"] == names
    discovered = [line for line in server.output if "method=server/discover" in line]
    assert discovered  # the Inspector negotiated the stateless era

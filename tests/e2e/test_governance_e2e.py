"""Policy and audit end to end: the real `mymcp` server, official SDK client, raw HTTP, CLI.

Anonymous and operator-bearer principals run against the real launcher in a subprocess;
OAuth principals (scopes, step-up) run against the in-process uvicorn server that the
OAuth tests use, because the issuer's hostname has to be routed to a loopback IdP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mymcp.app import create_host_app
from mymcp.auth import build_authenticator
from mymcp.config import (
    AdapterDeclaration,
    AdapterRoute,
    AuthenticationSettings,
    HostConfiguration,
    ServerSettings,
    parse_host_configuration,
)
from mymcp.governance import AuditLog, Governance, Policy, open_audit, read_records
from mymcp.plugins.mnemosyne import MnemosyneSettings, create_mnemosyne
from mymcp.runtime.bootstrap import Host, build_runtime
from tests.config.helpers import to_toml
from tests.e2e.auth_http import open_session, request_json, send
from tests.e2e.auth_issuer import (
    ISSUER,
    access_claims,
    issuer_client_factory,
    mint,
    public_jwk,
    running_issuer,
)
from tests.e2e.auth_sandbox import CLI_TIMEOUT, create_token, verifier_location
from tests.e2e.inprocess import serving
from tests.e2e.server import RunningServer, Sandbox, free_port, run_cli, serve

GATES = {"MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "true", "MNEMOSYNE_MEMORY_FORGET_ENABLED": "true"}
READ_TOOLS = ["list_tools", "memory_recall", "memory_list", "memory_inspect"]
NEEDLE = "zebra-umbrella-needle"


def _policy_config(sandbox: Sandbox, verifier: Path) -> str:
    return (
        "schema_version = 8\n"
        + sandbox.server_table()
        + "\n[authentication]\nanonymous_enabled = true\n"
        + "\n[[authentication.adapters]]\n"
        + 'id = "local-operator"\ntype = "operator-bearer-v1"\nenabled = true\n'
        + 'route = { source = "authorization", scheme = "bearer" }\n'
        + f"\n[authentication.operator_bearer]\nverifier_path = {json.dumps(str(verifier))}\n"
        + '\n[policy]\ndefault = "deny"\n'
        + '\n[[policy.rules]]\nprincipals = ["anonymous"]\nallow = ["@read_only"]\n'
        + '\n[[policy.rules]]\nprincipals = ["operator:alice"]\nallow = ["memory_*"]\n'
        + 'deny = ["memory_forget"]\n'
    )


async def _sdk(
    url: str, token: str | None, call: str, arguments: dict[str, Any], mode: str = "auto"
) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        names = [tool.name for tool in (await client.list_tools()).tools]
        try:
            called: Any = await client.call_tool(call, arguments)
        except MCPError as exc:
            called = exc
        return names, called


@dataclass
class Governed:
    sandbox: Sandbox
    server: RunningServer
    alice: str
    bob: str

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        """Stop the server gracefully: its shutdown commits every queued audit record."""
        self.server.process.terminate()
        self.server.process.wait(timeout=15)  # uvicorn re-raises SIGTERM once it is done
        assert any("Application shutdown complete" in line for line in self.server.output)


@pytest.fixture
def governed(sandbox: Sandbox) -> Iterator[Governed]:
    verifier = verifier_location(sandbox)
    sandbox.write_config(_policy_config(sandbox, verifier))
    alice, bob = create_token(sandbox, "alice"), create_token(sandbox, "bob")
    with serve(sandbox, GATES) as server:
        yield Governed(sandbox, server, alice, bob)


def _audit_cli(sandbox: Sandbox, *args: str) -> Any:
    return run_cli(["audit", *args], sandbox.environ(GATES), timeout=CLI_TIMEOUT)


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the stateless and handshake eras
def test_each_principal_sees_and_calls_only_what_policy_allows(
    governed: Governed, mode: str
) -> None:
    names, called = anyio.run(_sdk, governed.url, None, "memory_remember", {}, mode)
    assert names == READ_TOOLS
    assert isinstance(called, MCPError)
    assert (called.error.code, called.error.message) == (-32602, "Unknown tool: memory_remember")

    names, called = anyio.run(_sdk, governed.url, governed.alice, "memory_forget", {}, mode)
    assert names == [*READ_TOOLS, "memory_remember"]
    assert isinstance(called, MCPError)
    assert called.error.message == "Unknown tool: memory_forget"

    names, called = anyio.run(_sdk, governed.url, governed.bob, "list_tools", {}, mode)
    assert names == ["list_tools"]  # no rule speaks for bob: default deny
    assert called.structured_content["tools"] == ["list_tools"]

    _, absent = anyio.run(_sdk, governed.url, governed.alice, "memory_nothing", {}, mode)
    assert isinstance(absent, MCPError)
    assert (absent.error.code, absent.error.message) == (-32602, "Unknown tool: memory_nothing")


def test_calls_are_audited_content_free_and_the_chain_verifies(governed: Governed) -> None:
    arguments = {"scope": "project", "query": NEEDLE}
    _, recalled = anyio.run(_sdk, governed.url, governed.alice, "memory_recall", arguments)
    assert recalled.is_error is False
    anyio.run(_sdk, governed.url, governed.alice, "memory_forget", {})
    with httpx.Client(timeout=10) as http:
        refused = send(http, "POST", governed.url, authorization=["Bearer mymcp1.nope"])
        assert refused.status_code == 401
    governed.stop()

    shown = _audit_cli(governed.sandbox, "show", "--principal", "operator:alice", "--json")
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    calls = [
        (r["tool"], r["decision"], r.get("outcome")) for r in records if r["event"] == "tool_call"
    ]
    assert ("memory_recall", "allowed", "ok") in calls
    assert ("memory_forget", "denied", None) in calls

    audit_dir = governed.sandbox.home / ".local" / "state" / "mymcp" / "audit"
    raw = b"".join(path.read_bytes() for path in audit_dir.glob("segment-*.jsonl"))
    assert NEEDLE.encode() not in raw
    assert governed.alice.encode() not in raw

    verified = _audit_cli(governed.sandbox, "verify")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("ok records=")
    readable = _audit_cli(governed.sandbox, "show", "--tool", "memory_forget")
    assert "memory_forget" in readable.stdout
    assert "denied" in readable.stdout


def test_verify_names_the_first_tampered_record(governed: Governed) -> None:
    anyio.run(_sdk, governed.url, governed.alice, "memory_recall", {"scope": "self", "query": "x"})
    governed.stop()
    audit_dir = governed.sandbox.home / ".local" / "state" / "mymcp" / "audit"
    verified = _audit_cli(governed.sandbox, "verify")
    assert verified.returncode == 0, verified.stderr
    segment = audit_dir / "segment-000001.jsonl"
    lines = segment.read_bytes().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if b'"principal":"operator:alice"' in line)
    lines[first] = lines[first].replace(b'"operator:alice"', b'"operator:mallory"')
    segment.write_bytes(b"".join(lines))
    broken = _audit_cli(governed.sandbox, "verify")
    assert broken.returncode == 1
    assert f"segment-000001.jsonl line {first + 1}" in broken.stderr


def test_policy_explain_reports_each_tool_and_its_rule(governed: Governed) -> None:
    explained = run_cli(
        ["policy", "explain", "--principal", "operator:alice", "--json"],
        governed.sandbox.environ(GATES),
        timeout=CLI_TIMEOUT,
    )
    assert explained.returncode == 0, explained.stderr
    document = json.loads(explained.stdout)
    decisions = {row["name"]: row for row in document["tools"]}
    assert decisions["memory_forget"] == {
        "name": "memory_forget",
        "allowed": False,
        "via": "deny",
        "rule": 1,
        "selector": "memory_forget",
    }
    assert decisions["memory_remember"]["allowed"] is True
    assert decisions["list_tools"]["via"] == "host"
    text = run_cli(
        ["policy", "explain", "--principal", "anonymous"],
        governed.sandbox.environ(GATES),
        timeout=CLI_TIMEOUT,
    )
    assert "memory_remember  policy default (deny)" in text.stdout


def test_a_typo_in_the_policy_stops_startup_and_names_rule_and_value(sandbox: Sandbox) -> None:
    verifier = verifier_location(sandbox)
    sandbox.write_config(
        _policy_config(sandbox, verifier).replace('"memory_forget"', '"memory_forgte"')
    )
    checked = run_cli(["check"], sandbox.environ(GATES), timeout=CLI_TIMEOUT)
    assert checked.returncode == 1
    assert "code=policy_unknown_tool" in checked.stderr
    assert "policy.rules[1].deny[0]" in checked.stderr
    assert "'memory_forgte'" in checked.stderr


# -- OAuth: scopes and step-up ------------------------------------------------------------

OAUTH_POLICY = {
    "default": "deny",
    "rules": [
        {"principals": ["scope:memory.read"], "allow": ["@read_only"]},
        {"principals": ["scope:memory.write"], "allow": ["@mutating"]},
    ],
}


@dataclass
class OAuthGoverned:
    url: str
    base: str
    key: rsa.RSAPrivateKey
    audit: AuditLog

    def token(self, **claims: object) -> str:
        return mint(self.key, alg="RS256", kid="rsa-1", claims=access_claims(self.url, **claims))


@pytest.fixture(scope="module")
def oauth_governed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthGoverned]:
    root = tmp_path_factory.mktemp("oauth-governed")
    home, certs = root / "home", root / "no-system-certs"
    home.mkdir(mode=0o700)
    certs.mkdir()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    port = free_port()
    document = {
        "schema_version": 8,
        "policy": OAUTH_POLICY,
        "audit": {"directory": str(root / "audit")},
    }
    parsed = parse_host_configuration(to_toml(document).encode())
    adapter = AdapterDeclaration(
        "idp", "oauth-jwt-jwks-v1", True, AdapterRoute("authorization", "bearer")
    )
    configuration = HostConfiguration(
        schema_version=8,
        server=ServerSettings("127.0.0.1", port),
        authentication=AuthenticationSettings(
            anonymous_enabled=False, adapters=(adapter,), oauth_issuer=ISSUER
        ),
        policy=parsed.policy,
        audit=parsed.audit,
        origin="loaded",
    )
    with (
        pytest.MonkeyPatch.context() as patch,
        running_issuer(root, [public_jwk(key, "rsa-1")]) as issuer,
    ):
        patch.setenv("SSL_CERT_FILE", str(issuer.ca_file))
        patch.setenv("SSL_CERT_DIR", str(certs))
        mnemosyne = create_mnemosyne(
            MnemosyneSettings(remember=True), environ={"HOME": str(home)}, home=home
        )
        runtime = build_runtime(configuration, mnemosyne)
        policy = Policy(configuration.policy, runtime)
        authenticator = build_authenticator(
            configuration.authentication,
            configuration.server,
            http_client_factory=issuer_client_factory(issuer),
        ).with_scopes_supported(policy.step_up_scopes)
        audit = open_audit(configuration)
        assert audit is not None
        host = Host(configuration, runtime, authenticator, Governance(policy, audit), mnemosyne)
        with serving(create_host_app(host), port):
            base = f"http://127.0.0.1:{port}"
            yield OAuthGoverned(f"{base}/mcp", base, key, audit)


def _tool_names(http: httpx.Client, stack: OAuthGoverned, token: str) -> list[str]:
    session = open_session(http, stack.url, token)
    listed = send(
        http,
        "POST",
        stack.url,
        authorization=[f"Bearer {token}"],
        session=session,
        body=request_json("tools/list"),
    )
    return [tool["name"] for tool in listed.json()["result"]["tools"]]


def _call(http: httpx.Client, stack: OAuthGoverned, token: str, name: str) -> httpx.Response:
    session = open_session(http, stack.url, token)
    return send(
        http,
        "POST",
        stack.url,
        authorization=[f"Bearer {token}"],
        session=session,
        body=request_json("tools/call", name=name, arguments={}),
    )


def test_scopes_decide_what_an_oauth_client_sees(oauth_governed: OAuthGoverned) -> None:
    with httpx.Client(timeout=10) as http:
        assert _tool_names(http, oauth_governed, oauth_governed.token()) == ["list_tools"]
        reader = oauth_governed.token(scope="memory.read openid")
        assert _tool_names(http, oauth_governed, reader) == READ_TOOLS
        writer = oauth_governed.token(scp=["memory.read", "memory.write"])
        assert _tool_names(http, oauth_governed, writer) == [*READ_TOOLS, "memory_remember"]


def test_a_call_a_scope_would_allow_gets_a_403_step_up(oauth_governed: OAuthGoverned) -> None:
    metadata = f"{oauth_governed.base}/.well-known/oauth-protected-resource/mcp"
    with httpx.Client(timeout=10) as http:
        reader = oauth_governed.token(scope="memory.read openid")
        response = _call(http, oauth_governed, reader, "memory_remember")
        assert response.status_code == 403
        assert response.headers["www-authenticate"] == (
            'Bearer error="insufficient_scope", scope="memory.read memory.write", '
            f'resource_metadata="{metadata}"'
        )
        assert response.json()["error"]["code"] == -32600
        nothing = _call(http, oauth_governed, oauth_governed.token(), "memory_recall")
        assert nothing.status_code == 403
        assert 'scope="memory.read"' in nothing.headers["www-authenticate"]
        absent = _call(http, oauth_governed, reader, "memory_nothing")
        assert absent.status_code == 200
        assert absent.json()["error"]["message"] == "Unknown tool: memory_nothing"
        writer = oauth_governed.token(scope="memory.read memory.write")
        allowed = _call(http, oauth_governed, writer, "memory_remember")
        assert allowed.status_code == 200
        assert "result" in allowed.json()  # reached the tool (which rejects {} itself)


def test_protected_resource_metadata_lists_the_step_up_scopes(
    oauth_governed: OAuthGoverned,
) -> None:
    metadata = httpx.get(
        f"{oauth_governed.base}/.well-known/oauth-protected-resource/mcp", timeout=10
    ).json()
    assert metadata["scopes_supported"] == ["memory.read", "memory.write"]


def test_oauth_decisions_are_audited_with_the_subject(oauth_governed: OAuthGoverned) -> None:
    with httpx.Client(timeout=10) as http:
        _call(http, oauth_governed, oauth_governed.token(sub="carol"), "memory_recall")
    oauth_governed.audit.commit()  # the server's own writer would within a second
    records = [r for r in read_records(oauth_governed.audit.directory) if r["event"] == "tool_call"]
    (carol,) = [r for r in records if r["principal"] == "oauth:carol"]
    assert (carol["tool"], carol["decision"]) == ("memory_recall", "insufficient_scope")

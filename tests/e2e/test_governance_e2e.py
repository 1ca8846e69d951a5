"""Policy and audit end to end: the real `mymcp` server, official SDK client, raw HTTP, CLI.

Anonymous and operator-bearer principals run against the real launcher in a subprocess;
OAuth principals (scopes, step-up) run against an in-process uvicorn server over the host
`build_host` makes from a configuration file, because the issuer's hostname has to be
routed to a loopback IdP.
"""

from __future__ import annotations

import functools
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

from mymcp import host as composition_root
from mymcp.app import create_host_app
from mymcp.governance import AuditLog, read_records
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
from tests.e2e.server import RunningServer, Sandbox, make_sandbox, run_cli, serve

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


STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _raw_call(http: httpx.Client, url: str, session: str | None, name: str) -> httpx.Response:
    """One anonymous `tools/call` of `name`: in a session, or in the stateless era."""
    arguments = {"scope": "project", "content": "x"}
    if session is not None:
        body = request_json("tools/call", name=name, arguments=arguments)
        return send(http, "POST", url, session=session, body=body)
    body = request_json("tools/call", name=name, arguments=arguments, _meta=STATELESS_META)
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": name,
    }
    return http.post(url, json=body, headers=headers)


@pytest.mark.parametrize("era", ["session", "stateless"])
def test_a_denied_call_is_answered_byte_for_byte_like_an_absent_tool(
    governed: Governed, era: str
) -> None:
    with httpx.Client(timeout=10) as http:
        session = None
        if era == "session":
            session = send(http, "POST", governed.url).headers["mcp-session-id"]
        denied = _raw_call(http, governed.url, session, "memory_remember")  # denied: anonymous
        absent = _raw_call(http, governed.url, session, "memory_rxmember")  # no such tool
    assert denied.status_code == absent.status_code
    assert b"Unknown tool: memory_remember" in denied.content
    assert denied.content == absent.content.replace(b"memory_rxmember", b"memory_remember")

    def headers(response: httpx.Response) -> list[tuple[str, str]]:
        return [(k, v) for k, v in response.headers.multi_items() if k != "date"]

    assert headers(denied) == headers(absent)


def test_calls_are_audited_content_free_and_the_chain_verifies(governed: Governed) -> None:
    arguments = {"scope": "project", "query": NEEDLE}
    _, recalled = anyio.run(_sdk, governed.url, governed.alice, "memory_recall", arguments)
    assert recalled.is_error is False
    anyio.run(_sdk, governed.url, governed.alice, "memory_forget", {})
    with httpx.Client(timeout=10) as http:
        refused = send(http, "POST", governed.url, authorization=["Bearer mymcp1.nope"])
        assert refused.status_code == 401
        left_open = send(http, "POST", governed.url)  # a session nobody closes
        assert left_open.status_code == 200
    governed.stop()

    shown = _audit_cli(governed.sandbox, "show", "--principal", "operator:alice", "--json")
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    calls = [
        (r["tool"], r["decision"], r.get("outcome")) for r in records if r["event"] == "tool_call"
    ]
    assert ("memory_recall", "allowed", "ok") in calls
    assert ("memory_forget", "denied", None) in calls

    everything = _audit_cli(governed.sandbox, "show", "--json")
    records = [json.loads(line) for line in everything.stdout.splitlines()]
    opened = {r["session"]: r["principal"] for r in records if r["event"] == "session_open"}
    closed = {r["session"]: r["reason"] for r in records if r["event"] == "session_close"}
    assert closed.keys() == opened.keys()  # every session's end is recorded
    assert "shutdown" in closed.values()  # the one left open ended with the server

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


def test_policy_explain_says_when_anonymous_access_is_off_and_counts_a_scope_once(
    sandbox: Sandbox,
) -> None:
    sandbox.write_config(
        "schema_version = 8\n"
        + sandbox.server_table()
        + "[authentication]\nanonymous_enabled = false\n"
    )
    anonymous = run_cli(
        ["policy", "explain", "--principal", "anonymous"], sandbox.environ(), timeout=CLI_TIMEOUT
    )
    assert anonymous.returncode == 0, anonymous.stderr
    assert "note: anonymous access is off" in anonymous.stdout
    as_json = run_cli(
        ["policy", "explain", "--principal", "anonymous", "--json"],
        sandbox.environ(),
        timeout=CLI_TIMEOUT,
    )
    (note,) = json.loads(as_json.stdout)["notes"]
    assert note.startswith("anonymous access is off")
    scoped = run_cli(
        [
            "policy",
            "explain",
            "--principal",
            "oauth:x",
            "--scope",
            "b",
            "--scope",
            "a",
            "--scope",
            "b",
        ],
        sandbox.environ(),
        timeout=CLI_TIMEOUT,
    )
    assert scoped.returncode == 0, scoped.stderr
    assert "scopes: a b\n" in scoped.stdout
    assert "anonymous access is off" not in scoped.stdout


def test_policy_explain_takes_a_subject_that_holds_a_star(sandbox: Sandbox) -> None:
    # A subject may hold `*`: a rule names it with `\*`, and explain takes it as it is.
    sandbox.write_config(
        "schema_version = 8\n"
        + sandbox.server_table()
        + '[policy]\ndefault = "deny"\n[[policy.rules]]\n'
        + "principals = ['operator:bob\\*']\nallow = [\"memory_recall\"]\n"
    )
    rows = {}
    for principal in ("operator:bob*", "operator:bobby"):
        explained = run_cli(
            ["policy", "explain", "--principal", principal, "--json"],
            sandbox.environ(),
            timeout=CLI_TIMEOUT,
        )
        assert explained.returncode == 0, explained.stderr
        tools = json.loads(explained.stdout)["tools"]
        rows[principal] = {row["name"]: row["allowed"] for row in tools}
    assert rows["operator:bob*"]["memory_recall"] is True
    assert rows["operator:bobby"]["memory_recall"] is False


def test_a_typo_in_the_policy_stops_startup_and_names_rule_and_value(sandbox: Sandbox) -> None:
    verifier = verifier_location(sandbox)
    sandbox.write_config(
        _policy_config(sandbox, verifier).replace('"memory_forget"', '"memory_forgte"')
    )
    checked = run_cli(["check"], sandbox.environ(GATES), timeout=CLI_TIMEOUT)
    assert checked.returncode == 1
    assert "code=policy_unknown_tool" in checked.stderr
    assert "policy.rules[1].deny[0]" in checked.stderr
    assert '"memory_forgte"' in checked.stderr


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("directory", "MyMCP audit directory is not private: mode 0777, expected 0700"),
        ("key", "MyMCP audit key is unreadable or not private"),
    ],
)
def test_check_fails_where_the_server_would_refuse_the_audit_directory(
    sandbox: Sandbox, fault: str, said: str
) -> None:
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table())
    audit = sandbox.home / ".local" / "state" / "mymcp" / "audit"
    AuditLog(audit, max_segment_bytes=1 << 20, max_segments=4).close()
    if fault == "directory":
        audit.chmod(0o777)
    else:
        (audit / "audit.key").chmod(0o644)
    checked = run_cli(["check"], sandbox.environ(), timeout=CLI_TIMEOUT)
    served = run_cli([], sandbox.environ(), timeout=CLI_TIMEOUT)  # fails before serving
    for run in (checked, served):
        assert run.returncode == 1
        (error,) = [line for line in run.stderr.splitlines() if line.startswith("mymcp: error:")]
        assert said in error
        assert str(audit) in error  # the operator's terminal names the path
        assert error.endswith("(code=audit_unavailable)")
    logs = [line for line in served.stderr.splitlines() if not line.startswith("mymcp: error:")]
    assert "code=audit_unavailable" in "\n".join(logs)
    assert not any(str(audit) in line for line in logs)  # the log lines do not


# -- OAuth: scopes and step-up ------------------------------------------------------------

OAUTH_POLICY: dict[str, Any] = {
    "default": "deny",
    "rules": [
        {"principals": ["scope:memory.read"], "allow": ["@read_only"]},
        {"principals": ["scope:memory.write"], "allow": ["@mutating"]},
        # Named by a rule, yet never asked for nor advertised: it is for refresh tokens.
        {"principals": ["scope:offline_access"], "allow": ["memory_list"]},
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


def _oauth_config(sandbox: Sandbox, audit: Path) -> str:
    rules = "".join(
        f"\n[[policy.rules]]\nprincipals = {json.dumps(rule['principals'])}\n"
        f"allow = {json.dumps(rule['allow'])}\n"
        for rule in OAUTH_POLICY["rules"]
    )
    return (
        "schema_version = 8\n"
        + sandbox.server_table()
        + "\n[authentication]\nanonymous_enabled = false\n"
        + '\n[[authentication.adapters]]\nid = "idp"\ntype = "oauth-jwt-jwks-v1"\n'
        + 'enabled = true\nroute = { source = "authorization", scheme = "bearer" }\n'
        + f"\n[authentication.oauth_jwt]\nissuer = {json.dumps(ISSUER)}\n"
        + f'\n[policy]\ndefault = "deny"\n{rules}'
        + f"\n[audit]\ndirectory = {json.dumps(str(audit))}\n"
    )


@pytest.fixture(scope="module")
def oauth_governed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthGoverned]:
    """The host exactly as the launcher builds it (`build_host` from a configuration
    file), except that the authenticator's HTTPS client reaches the loopback issuer."""
    root = tmp_path_factory.mktemp("oauth-governed")
    sandbox = make_sandbox(root)
    certs = root / "no-system-certs"
    certs.mkdir()
    sandbox.write_config(_oauth_config(sandbox, root / "audit"))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with (
        pytest.MonkeyPatch.context() as patch,
        running_issuer(root, [public_jwk(key, "rsa-1")]) as issuer,
    ):
        patch.setenv("SSL_CERT_FILE", str(issuer.ca_file))
        patch.setenv("SSL_CERT_DIR", str(certs))
        routed = functools.partial(
            composition_root.build_authenticator, http_client_factory=issuer_client_factory(issuer)
        )
        patch.setattr(composition_root, "build_authenticator", routed)
        host = composition_root.build_host(
            sandbox.environ({"MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "true"}), sandbox.home
        )
        audit = host.governance.audit
        assert audit is not None
        with serving(create_host_app(host), sandbox.port):
            base = f"http://127.0.0.1:{sandbox.port}"
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
        refreshing = oauth_governed.token(scope="offline_access memory.read")
        kept = _call(http, oauth_governed, refreshing, "memory_remember")
        assert 'scope="memory.read memory.write"' in kept.headers["www-authenticate"]
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
    # The scopes `scope:` rules name, from the bootstrap's own wiring; offline_access,
    # though a rule names it, is not one a client is ever asked for.
    assert metadata["scopes_supported"] == ["memory.read", "memory.write"]
    # The 401 challenge names them too, as the scopes a client asks for before a call.
    refused = httpx.post(oauth_governed.url, json={}, timeout=10)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{oauth_governed.base}/.well-known/oauth-protected-resource/mcp"'
        ', scope="memory.read memory.write"'
    )


def test_oauth_decisions_are_audited_with_the_subject(oauth_governed: OAuthGoverned) -> None:
    with httpx.Client(timeout=10) as http:
        _call(http, oauth_governed, oauth_governed.token(sub="carol"), "memory_recall")
    oauth_governed.audit.commit()  # the server's own writer would within a second
    records = [r for r in read_records(oauth_governed.audit.directory) if r["event"] == "tool_call"]
    (carol,) = [r for r in records if r["principal"] == "oauth:carol"]
    assert (carol["tool"], carol["decision"]) == ("memory_recall", "insufficient_scope")

"""Operator bearer tokens end to end: CLI provisioning, the real server, SDK and raw HTTP.

Also: an external plugin and operator-bearer authentication enabled together.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from pathlib import Path

import anyio
import httpx
import pytest

from tests.e2e.auth_http import SDK_MODES, open_session, request_json, sdk_session, send
from tests.e2e.auth_sandbox import (
    CLI_TIMEOUT,
    bearer_config,
    create_token,
    credential_id,
    secret_of,
    verifier_location,
)
from tests.e2e.server import RunningServer, Sandbox, run_cli, serve

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PLUGIN_DIR = REPO_ROOT / "examples" / "example_plugin"


def bad_authorizations(alice: str) -> dict[str, list[str]]:
    """Each entry is the complete list of `Authorization` values sent on one request."""
    unknown_secret = f"mymcp1.{credential_id(alice)}.{'A' * 42}E"  # valid grammar, wrong secret
    unknown_id = f"mymcp1.{'0' * 32}.{secret_of(alice)}"
    return {
        "missing": [],
        "wrong_secret": [f"Bearer {unknown_secret}"],
        "unknown_id": [f"Bearer {unknown_id}"],
        "duplicate": [f"Bearer {alice}", f"Bearer {alice}"],
        "double_space": [f"Bearer  {alice}"],
        "scheme_only": ["Bearer"],
        "bad_grammar": [f"Bearer {alice}="],
        "other_scheme": [f"Basic {alice}"],
    }


def assert_unauthorized(response: httpx.Response, label: object = None) -> None:
    assert response.status_code == 401, label
    assert response.content == b"", label
    assert "mcp-session-id" not in response.headers, label
    # The challenge names the scheme; without OAuth there is no metadata URL to add.
    assert response.headers.get_list("www-authenticate") == ["Bearer"], label


@pytest.fixture
def provisioned(sandbox: Sandbox) -> tuple[Path, str, str]:
    """The bearer config, and tokens for alice and bob created with the CLI."""
    verifier = verifier_location(sandbox)
    sandbox.write_config(bearer_config(sandbox, verifier))
    alice = create_token(sandbox, "alice")
    bob = create_token(sandbox, "bob")
    assert alice != bob
    return verifier, alice, bob


def test_cli_provisioning_stores_only_digests(
    sandbox: Sandbox, provisioned: tuple[Path, str, str]
) -> None:
    verifier, alice, bob = provisioned
    assert stat.S_IMODE(verifier.stat().st_mode) == 0o600
    stored = verifier.read_text(encoding="utf-8")
    listed = run_cli(["auth", "token", "list"], sandbox.environ(), timeout=CLI_TIMEOUT)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        f"{credential_id(alice)}\talice",
        f"{credential_id(bob)}\tbob",
    ]
    for token in (alice, bob):
        assert secret_of(token) not in stored
        assert secret_of(token) not in listed.stdout + listed.stderr
    document = json.loads(stored)
    assert [record["subject"] for record in document["credentials"]] == ["alice", "bob"]


def test_operator_bearer_end_to_end(sandbox: Sandbox, provisioned: tuple[Path, str, str]) -> None:
    _, alice, bob = provisioned
    with serve(sandbox) as server:
        for mode, revision in SDK_MODES:
            outcome = anyio.run(functools.partial(sdk_session, server.url, alice, mode=mode))
            assert outcome.protocol_version == revision
            assert outcome.tool_names[0] == "list_tools"
            assert {"memory_recall", "memory_list", "memory_inspect"} <= set(outcome.tool_names)
            assert outcome.called.is_error is False
            assert outcome.called.structured_content["tools"] == outcome.tool_names

        with httpx.Client(timeout=10) as http:
            _check_rejections(http, server, alice)
            _check_cross_principal(http, server, alice, bob)

    revoked = run_cli(
        ["auth", "token", "revoke", credential_id(alice)], sandbox.environ(), timeout=CLI_TIMEOUT
    )
    assert revoked.returncode == 0, revoked.stderr
    listed = run_cli(["auth", "token", "list"], sandbox.environ(), timeout=CLI_TIMEOUT)
    assert listed.stdout.splitlines() == [f"{credential_id(bob)}\tbob"]
    assert listed.stderr == ""

    with serve(sandbox) as server, httpx.Client(timeout=10) as http:
        for method in ("POST", "GET", "DELETE"):
            assert_unauthorized(send(http, method, server.url, authorization=[f"Bearer {alice}"]))
        outcome = anyio.run(sdk_session, server.url, bob)
        assert outcome.called.is_error is False
        open_session(http, server.url, bob)


def _check_rejections(http: httpx.Client, server: RunningServer, alice: str) -> None:
    """Bad credentials: empty 401 on every method, no session created, nothing touched."""
    live = open_session(http, server.url, alice)
    for name, values in bad_authorizations(alice).items():
        for method in ("POST", "GET", "DELETE"):
            # POST carries an initialize body: had auth been skipped it would open a session.
            fresh = send(http, method, server.url, authorization=values)
            assert_unauthorized(fresh, (name, method))
            # With alice's live session id: the 401 comes first, so DELETE must not end it.
            bound = send(http, method, server.url, authorization=values, session=live)
            assert_unauthorized(bound, (name, method, "bound"))
    # The session survived every rejected DELETE and still answers alice.
    ping = send(
        http,
        "POST",
        server.url,
        authorization=[f"Bearer {alice}"],
        session=live,
        body=request_json("tools/list"),
    )
    assert ping.status_code == 200, ping.text
    assert ping.json()["result"]["tools"][0]["name"] == "list_tools"
    # A valid initialize still works after all the rejections; the scheme is case-blind.
    assert open_session(http, server.url, alice) != live
    mixed_case = send(http, "POST", server.url, authorization=[f"bEaReR {alice}"])
    assert mixed_case.status_code == 200
    assert mixed_case.headers["mcp-session-id"] != live


def _check_cross_principal(http: httpx.Client, server: RunningServer, alice: str, bob: str) -> None:
    """A session belongs to the principal that created it: another subject gets 404."""
    session = open_session(http, server.url, alice)
    as_bob = [f"Bearer {bob}"]
    listed = send(
        http,
        "POST",
        server.url,
        authorization=as_bob,
        session=session,
        body=request_json("tools/list"),
    )
    assert listed.status_code == 404
    assert "result" not in listed.json()
    assert send(http, "GET", server.url, authorization=as_bob, session=session).status_code == 404
    deleted = send(http, "DELETE", server.url, authorization=as_bob, session=session)
    assert deleted.status_code == 404
    as_alice = [f"Bearer {alice}"]
    still = send(
        http, "POST", server.url, authorization=as_alice, session=session, body=request_json("ping")
    )
    assert still.status_code == 200
    assert still.json()["result"] == {}
    assert (
        send(http, "DELETE", server.url, authorization=as_alice, session=session).status_code == 204
    )


def test_external_plugin_with_operator_bearer(sandbox: Sandbox) -> None:
    """An external plugin and an enabled authentication adapter start together."""
    manifest = EXAMPLE_PLUGIN_DIR / "manifest.json"
    plugins = (
        "\n[[plugins]]\n"
        'id = "example-plugin"\n'
        "enabled = true\n"
        f"manifest_path = {json.dumps(str(manifest))}\n"
        'module = "mymcp_example_plugin"\n'
    )
    verifier = verifier_location(sandbox)
    sandbox.write_config(bearer_config(sandbox, verifier, plugins))
    python_path = os.pathsep.join(
        part for part in (str(EXAMPLE_PLUGIN_DIR), os.environ.get("PYTHONPATH", "")) if part
    )
    extra = {"PYTHONPATH": python_path}
    token = create_token(sandbox, "plugin-user", sandbox.environ(extra))
    with serve(sandbox, extra) as server:
        session = functools.partial(
            sdk_session, call="example-plugin__word_count", arguments={"text": "a b c"}
        )
        outcome = anyio.run(session, server.url, token)
        with httpx.Client(timeout=10) as http:
            assert_unauthorized(send(http, "POST", server.url))
    names = outcome.tool_names
    assert names[0] == "list_tools"
    assert {"example-plugin__echo", "example-plugin__word_count"} <= set(names)
    assert any(name.startswith("memory_") for name in names)
    assert names.index("memory_recall") < names.index("example-plugin__echo")
    assert outcome.called.is_error is False
    assert outcome.called.structured_content == {"words": 3, "characters": 5}


def test_an_empty_listing_says_why(sandbox: Sandbox) -> None:
    verifier = verifier_location(sandbox)
    arguments = ["auth", "token", "list", "--verifier-file", str(verifier)]
    absent = run_cli(arguments, sandbox.environ(), timeout=CLI_TIMEOUT)
    assert (absent.returncode, absent.stdout) == (0, "")
    assert absent.stderr == f"mymcp: no credentials: {verifier} does not exist yet\n"
    created = run_cli(
        ["auth", "token", "create", "--subject", "carol", "--verifier-file", str(verifier)],
        sandbox.environ(),
        timeout=CLI_TIMEOUT,
    )
    assert created.returncode == 0, created.stderr
    (line,) = run_cli(arguments, sandbox.environ(), timeout=CLI_TIMEOUT).stdout.splitlines()
    revoked = run_cli(
        ["auth", "token", "revoke", line.split("\t")[0], "--verifier-file", str(verifier)],
        sandbox.environ(),
        timeout=CLI_TIMEOUT,
    )
    assert revoked.returncode == 0, revoked.stderr
    emptied = run_cli(arguments, sandbox.environ(), timeout=CLI_TIMEOUT)
    assert (emptied.returncode, emptied.stdout) == (0, "")
    assert emptied.stderr == f"mymcp: no credentials: {verifier} holds none\n"


def test_the_listing_shows_a_subject_s_invisible_characters_as_escapes(sandbox: Sandbox) -> None:
    verifier = verifier_location(sandbox)
    lookalike = "alice\u3164"  # a Hangul filler: prints as nothing at all
    created = run_cli(
        ["auth", "token", "create", "--subject", lookalike, "--verifier-file", str(verifier)],
        sandbox.environ(),
        timeout=CLI_TIMEOUT,
    )
    assert created.returncode == 0, created.stderr
    listed = run_cli(
        ["auth", "token", "list", "--verifier-file", str(verifier)],
        sandbox.environ(),
        timeout=CLI_TIMEOUT,
    )
    (line,) = listed.stdout.splitlines()
    assert line.split("\t")[1] == "alice\\u3164"

"""Authentication composition failures stop the real server before it serves anything.

Each case runs `mymcp` (serve) and `mymcp check`: both must exit non-zero with the stable
code, bind nothing and never print a path from the sandbox.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import pytest

from tests.e2e.auth_sandbox import (
    CLI_TIMEOUT,
    MCP_TABLE,
    bearer_config,
    create_token,
    verifier_location,
)
from tests.e2e.server import ERROR_PREFIX, Sandbox, log_and_errors, port_is_bound, run_cli


def _oauth_with_anonymous(sandbox: Sandbox) -> None:
    sandbox.write_config(
        "schema_version = 7\n"
        + sandbox.server_table()
        + "\n[authentication]\nanonymous_enabled = true\n"
        + "\n[[authentication.adapters]]\n"
        + 'id = "idp"\ntype = "oauth-jwt-jwks-v1"\nenabled = true\n'
        + 'route = { source = "authorization", scheme = "bearer" }\n'
        + '\n[authentication.oauth_jwt]\nissuer = "https://idp.mymcp.test/realms/e2e"\n'
        + MCP_TABLE
    )


def _missing_verifier(sandbox: Sandbox) -> None:
    verifier = verifier_location(sandbox)
    sandbox.write_config(bearer_config(sandbox, verifier))
    assert not verifier.exists()


def _group_readable_verifier(sandbox: Sandbox) -> None:
    verifier = verifier_location(sandbox)
    sandbox.write_config(bearer_config(sandbox, verifier))
    create_token(sandbox, "alice")
    os.chmod(verifier, 0o640)


def _schema_3_enabled_adapter(sandbox: Sandbox) -> None:
    sandbox.write_config(
        "schema_version = 3\n"
        + sandbox.server_table()
        + "\n[authentication]\nanonymous_enabled = false\n"
        + "\n[[authentication.adapters]]\n"
        + 'id = "local-operator"\ntype = "operator-bearer-v1"\nenabled = true\n'
        + 'route = { source = "authorization", scheme = "bearer" }\n'
    )


CASES: dict[str, tuple[Callable[[Sandbox], None], str]] = {
    "oauth_with_anonymous": (_oauth_with_anonymous, "anonymous_access_enabled"),
    "missing_verifier": (_missing_verifier, "verifier_source"),
    "group_readable_verifier": (_group_readable_verifier, "verifier_source"),
    "schema_3_enabled_adapter": (_schema_3_enabled_adapter, "adapter_type_unavailable"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_composition_failure_stops_startup(sandbox: Sandbox, case: str) -> None:
    prepare, code = CASES[case]
    prepare(sandbox)
    env = sandbox.environ()
    for command in ([], ["check"]):
        result = run_cli(command, env, timeout=CLI_TIMEOUT)
        output = result.stdout + result.stderr
        assert result.returncode != 0, (command, output)
        log, errors = log_and_errors(result.stderr)
        assert len(errors) == 1, (command, output)
        assert errors[0].endswith(f"(code={code})"), (command, output)
        if code != "verifier_source":  # a verifier file's fault names that file instead
            # Where in the configuration: the file, the line and column, the key.
            where = re.escape(f"{ERROR_PREFIX}{sandbox.config_file}:")
            assert re.match(where + r"[0-9]+:[0-9]+: authentication", errors[0]), errors[0]
        assert "Uvicorn running on" not in output
        assert str(sandbox.root) not in "\n".join(log) + result.stdout
        assert not port_is_bound(sandbox.port)

"""Operator commands through the real `mymcp` and `mymcp-test` entry points, in a private
HOME and XDG configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.server import Sandbox, log_and_errors, run_cli
from tests.e2e.test_external_plugins import _plugin_config, _synthetic_plugin

pytestmark = pytest.mark.slow

# Activates its one tool as read-write and under another version than its manifest's.
_MISMATCHED = """
import json
from pathlib import Path
from mymcp.plugin import (ActivatedTool, Consent, PluginAdapter, PluginContribution,
    QualifiedCapabilityId, ToolEffects, manifest_from_mapping, structured_result)

def mymcp_plugin_v1():
    definition = manifest_from_mapping(
        json.loads(Path(__file__).with_name("manifest.json").read_text()))
    tool = ActivatedTool(
        capability=QualifiedCapabilityId(definition.plugin_id, "tool", "ping"),
        tool={"description": "Pong.", "inputSchema": {"type": "object"}},
        handler=lambda arguments: structured_result({}),
        effects=ToolEffects(read_only=False, destructive=False, idempotent=True,
                            open_world=False),
        consent=Consent.NONE,
    )
    return PluginAdapter(definition, PluginContribution(definition.plugin_id, "9.9.9", (tool,)))
"""


def test_plugin_check_prints_every_mismatch(sandbox: Sandbox) -> None:
    folder = _synthetic_plugin(sandbox, "odd", "odd_plugin", _MISMATCHED)
    manifest = folder / "manifest.json"
    environment = sandbox.environ({"PYTHONPATH": str(folder)})
    checked = run_cli(["plugin", "check", str(manifest), "--import", "odd_plugin"], environment)
    assert checked.returncode == 1
    _, errors = log_and_errors(checked.stderr)
    version = json.loads(manifest.read_text())["version"]
    assert errors == [
        "mymcp: error: plugin odd (module odd_plugin): MyMCP plugin contribution version does "
        f"not match: the contribution has version '9.9.9', the manifest '{version}' "
        "(code=contribution_version_mismatch)",
        "mymcp: error: plugin odd (module odd_plugin): MyMCP plugin tool effects or consent "
        "differ from the manifest: tool 'ping': read_only is true in the manifest, false in "
        "the adapter (code=capability_metadata_mismatch)",
    ]
    # The server stops at the first, under the composition code, naming the same fault.
    sandbox.write_config(_plugin_config(sandbox, "odd", manifest, "odd_plugin"))
    started = run_cli(["check"], environment)
    _, said = log_and_errors(started.stderr)
    assert said == [
        "mymcp: error: plugin odd (module odd_plugin): MyMCP external plugins could not be "
        f"composed with the host: contribution_version_mismatch: the contribution has version "
        f"'9.9.9', the manifest '{version}' (code=external_plugin_composition_invalid)"
    ]


def test_check_reports_what_it_composed(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table())
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 0, checked.stderr
    audit = sandbox.home / ".local" / "state" / "mymcp" / "audit"
    assert checked.stdout.splitlines() == [
        f"configuration: {sandbox.config_file} (schema 8)",
        "plugins: none",
        "tools: list_tools, memory_recall, memory_list, memory_inspect",
        "authentication: anonymous allowed; no adapter enabled",
        "policy: none (every principal may call every tool)",
        f"audit: on, {audit} (created at first start)",
        f"memory: {sandbox.memory_root} (absent; created by the first remember)",
        "mymcp: check OK",
    ]
    assert not sandbox.memory_root.exists()
    assert not audit.exists()  # check never creates files


def test_mymcp_test_runs_the_checkout_suite_from_any_directory(tmp_path: Path) -> None:
    runner = Path(sys.executable).with_name("mymcp-test")
    ran = subprocess.run(
        [str(runner), "tests/test_opencode_config.py", "-q", "-p", "no:randomly"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert " passed" in ran.stdout


@pytest.mark.parametrize(
    ("body", "mode", "environment", "expected"),
    [
        (
            "schema_version = 8\n[server]\nprot = 8000\n",
            0o600,
            {},
            "{file}:3:1: server.prot: MyMCP configuration does not match its schema: unknown "
            "key; [server] takes address, log_format, log_level, port (code=invalid_schema)",
        ),
        (
            'schema_version = 8\n[server]\nport = "8000"\n',
            0o600,
            {},
            "{file}:3:1: server.port: MyMCP configuration does not match its schema: expected "
            "an integer from 1 to 65535, got '8000' (a string) (code=invalid_schema)",
        ),
        (
            "schema_version = 8\n[server]\nport 8000\n",
            0o600,
            {},
            "{file}:3:6: MyMCP configuration is not valid TOML: Expected '=' after a key in a "
            "key/value pair (code=invalid_toml)",
        ),
        (
            "schema_version = 8\n",
            0o620,
            {},
            "{file}: MyMCP configuration source permissions are unsafe: the file is writable "
            "by group or others (mode 0620); run: chmod go-w {file} (code=unsafe_permissions)",
        ),
        (
            "schema_version = 8\n",
            0o600,
            {"MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "yes"},
            "$MNEMOSYNE_MEMORY_REMEMBER_ENABLED: Mnemosyne setting in the environment is "
            "invalid: expected exactly true or false, got 'yes' (a string) "
            "(code=invalid_environment)",
        ),
    ],
    ids=["unknown-key", "mistyped-port", "toml-syntax", "permissions", "environment"],
)
def test_check_names_the_fault(
    sandbox: Sandbox, body: str, mode: int, environment: dict[str, str], expected: str
) -> None:
    sandbox.write_config(body)
    sandbox.config_file.chmod(mode)
    checked = run_cli(["check"], sandbox.environ(environment))
    assert checked.returncode == 1
    log, errors = log_and_errors(checked.stderr)
    assert errors == ["mymcp: error: " + expected.format(file=sandbox.config_file)]
    assert str(sandbox.root) not in "\n".join(log)

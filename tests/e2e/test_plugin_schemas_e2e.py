"""Published input schemas at the operator's terminal and at startup: `mymcp plugin check
--import` lints them (portability warns, an invalid schema fails), and the server refuses
an external plugin whose schema does not compile."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.server import Sandbox, run_cli
from tests.e2e.test_external_plugins import _assert_refused, _synthetic_plugin

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "example_plugin"
FIXTURE = REPO / "tests" / "conformance_fixture"

_INVALID_SCHEMA_MODULE = """
import json
from pathlib import Path
from mymcp.plugin import (ActivatedTool, Consent, PluginAdapter, PluginContribution,
    QualifiedCapabilityId, ToolEffects, manifest_from_mapping, structured_result)

def mymcp_plugin_v1():
    definition = manifest_from_mapping(
        json.loads(Path(__file__).with_name("manifest.json").read_text()))
    tool = ActivatedTool(
        capability=QualifiedCapabilityId(definition.plugin_id, "tool", "ping"),
        tool={"description": "Answers pong.",
              "inputSchema": {"type": "object", "properties": {"tz": {"type": "strin"}}}},
        handler=lambda arguments: structured_result({"pong": True}),
        effects=ToolEffects(read_only=True, destructive=False, idempotent=True, open_world=False),
        consent=Consent.NONE,
    )
    return PluginAdapter(definition, PluginContribution(definition.plugin_id,
                                                        definition.version, (tool,)))
"""

pytestmark = pytest.mark.slow


def test_a_clean_plugin_passes_the_schema_lint(sandbox: Sandbox) -> None:
    checked = run_cli(
        ["plugin", "check", str(EXAMPLE / "manifest.json"), "--import", "mymcp_example_plugin"],
        sandbox.environ({"PYTHONPATH": str(EXAMPLE)}),
    )
    assert checked.returncode == 0, checked.stderr
    assert "module OK: mymcp_example_plugin" in checked.stdout
    assert "warning" not in checked.stderr


def test_root_combinators_are_warnings_not_errors(sandbox: Sandbox) -> None:
    checked = run_cli(
        [
            "plugin",
            "check",
            str(FIXTURE / "manifest.json"),
            "--import",
            "tests.conformance_fixture.mymcp_conformance_fixture",
        ],
        sandbox.environ({"PYTHONPATH": str(REPO)}),
    )
    assert checked.returncode == 0, checked.stderr
    warnings = [line for line in checked.stderr.splitlines() if line.startswith("mymcp: warning")]
    assert [line.split("'")[1] for line in warnings] == ["allOf", "if", "then", "else", "$defs"]
    assert all("tool json_schema_2020_12_tool:" in line for line in warnings)
    assert all("code=schema_root_not_portable" in line for line in warnings)


def test_an_invalid_schema_fails_the_check_and_the_startup(sandbox: Sandbox) -> None:
    folder = _synthetic_plugin(sandbox, "broken", "broken_plugin", _INVALID_SCHEMA_MODULE)
    environment = sandbox.environ({"PYTHONPATH": str(folder)})
    checked = run_cli(
        ["plugin", "check", str(folder / "manifest.json"), "--import", "broken_plugin"],
        environment,
    )
    assert checked.returncode == 1
    # The start's own code and words, naming the tool.
    assert "(broken:tool:ping): the input schema breaks the JSON Schema 2020-12" in checked.stderr
    assert "code=external_plugin_schema_invalid" in checked.stderr
    manifest = folder / "manifest.json"
    sandbox.write_config(sandbox.plugin_config("broken", manifest, "broken_plugin"))
    _assert_refused(sandbox, {"PYTHONPATH": str(folder)}, "external_plugin_schema_invalid")


def test_an_unimportable_module_is_reported_with_its_code(sandbox: Sandbox) -> None:
    checked = run_cli(
        ["plugin", "check", str(EXAMPLE / "manifest.json"), "--import", "no_such_module_here"],
        sandbox.environ(),
    )
    assert checked.returncode == 1
    assert "code=external_plugin_import_failed" in checked.stderr

"""External plugins end to end: served next to the memory tools, or startup refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.e2e.server import Sandbox, log_and_errors, port_is_bound, run_cli, serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "example_plugin"


def _install_example(sandbox: Sandbox) -> Path:
    target = sandbox.root / "plugins" / "example"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in (target, *target.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def _synthetic_plugin(sandbox: Sandbox, plugin_id: str, module: str, body: str) -> Path:
    """A one-tool plugin built on the public API; `body` may replace its module source."""
    folder = sandbox.root / "plugins" / module
    folder.mkdir(parents=True)
    manifest = {
        "manifest_version": 1,
        "id": plugin_id,
        "title": "Synthetic",
        "description": "A plugin made by a test.",
        "version": "1.0.0",
        "requires": {"host_api": {"min": 1, "max": 1}},
        "capabilities": [
            {
                "kind": "tool",
                "id": "ping",
                "version": "1.0.0",
                "read_only": True,
                "destructive": False,
                "idempotent": True,
                "open_world": False,
                "consent": "none",
            }
        ],
        "configuration": {
            "schema_version": 1,
            "schema": {"type": "object", "properties": {}, "additionalProperties": False},
        },
        "secret_references": [],
        "data_schema_version": 1,
        "authority": {"filesystem": [], "network": False},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (folder / f"{module}.py").write_text(body, encoding="utf-8")
    return folder


_WORKING_MODULE = """
import json
from pathlib import Path
from mymcp.plugin import (ActivatedTool, Consent, PluginAdapter, PluginContribution,
    QualifiedCapabilityId, ToolEffects, manifest_from_mapping, structured_result)

def mymcp_plugin_v1():
    definition = manifest_from_mapping(
        json.loads(Path(__file__).with_name("manifest.json").read_text()))
    tool = ActivatedTool(
        capability=QualifiedCapabilityId(definition.plugin_id, "tool", "ping"),
        tool={"description": "Answers pong.", "inputSchema": {"type": "object"}},
        handler=lambda arguments: structured_result({"pong": True}),
        effects=ToolEffects(read_only=True, destructive=False, idempotent=True, open_world=False),
        consent=Consent.NONE,
    )
    return PluginAdapter(definition, PluginContribution(definition.plugin_id,
                                                        definition.version, (tool,)))
"""


async def _list_and_call(url: str) -> tuple[list[str], dict[str, object]]:
    async with Client(url) as client:
        tools = (await client.list_tools()).tools
        called = await client.call_tool("example-plugin__word_count", {"text": "one two three"})
        return [tool.name for tool in tools], called.structured_content


def test_example_plugin_is_served_next_to_memory_tools(sandbox: Sandbox) -> None:
    folder = _install_example(sandbox)
    sandbox.write_config(
        sandbox.plugin_config("example-plugin", folder / "manifest.json", "mymcp_example_plugin")
    )
    with serve(sandbox, {"PYTHONPATH": str(folder)}) as server:
        names, result = anyio.run(_list_and_call, server.url)
    assert names[:4] == ["list_tools", "memory_recall", "memory_list", "memory_inspect"]
    assert names[-2:] == ["example-plugin__echo", "example-plugin__word_count"]
    assert result == {"words": 3, "characters": 13}


def _assert_refused(sandbox: Sandbox, env: dict[str, str], code: str) -> str:
    """Both `mymcp` and `mymcp check` refuse with the same error line, which is returned;
    the log lines around it carry the code and no path."""
    said = set()
    for args in ([], ["check"]):
        failed = run_cli(args, sandbox.environ(env))
        assert failed.returncode == 1, failed.stderr
        log, errors = log_and_errors(failed.stderr)
        assert len(errors) == 1, failed.stderr
        assert errors[0].endswith(f"(code={code})")
        assert any(f"code={code}" in line for line in log), failed.stderr
        assert str(sandbox.root) not in "\n".join(log) + failed.stdout
        said.add(errors[0])
    assert not port_is_bound(sandbox.port)
    (line,) = said
    return line


def test_reserved_name_collision_stops_startup(sandbox: Sandbox) -> None:
    # Plugin id `mymcp` would publish `mymcp__ping`, inside the host's reserved prefix.
    folder = _synthetic_plugin(sandbox, "mymcp", "collides", _WORKING_MODULE)
    sandbox.write_config(sandbox.plugin_config("mymcp", folder / "manifest.json", "collides"))
    _assert_refused(sandbox, {"PYTHONPATH": str(folder)}, "external_plugin_composition_invalid")


@pytest.mark.parametrize(
    ("body", "code", "said"),
    [
        ("import os\nos._exit(0)\n", "external_plugin_import_failed", "called os._exit(0)"),
        (
            _WORKING_MODULE.replace(
                "def mymcp_plugin_v1():", "def mymcp_plugin_v1():\n    os._exit(7)"
            )
            + "import os\n",
            "external_plugin_entrypoint_invalid",
            "mymcp_plugin_v1() called os._exit(7)",
        ),
    ],
    ids=["import", "entrypoint"],
)
def test_a_plugin_ending_the_process_while_it_loads_is_named_and_fails_the_check(
    sandbox: Sandbox, body: str, code: str, said: str
) -> None:
    # Otherwise the process would end with the plugin's status (0 passing a check) and
    # no line naming it.
    folder = _synthetic_plugin(sandbox, "quitter", "quitter_plugin", body)
    sandbox.write_config(
        sandbox.plugin_config("quitter", folder / "manifest.json", "quitter_plugin")
    )
    line = _assert_refused(sandbox, {"PYTHONPATH": str(folder)}, code)
    assert line.startswith("mymcp: error: plugin quitter (module quitter_plugin)")
    assert said in line


def test_a_child_a_plugin_forks_while_it_loads_ends_as_it_asks(sandbox: Sandbox) -> None:
    # Only the loading process is kept from ending: a child's own os._exit is its exit.
    body = (
        "import os\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    os._exit(5)\n"
        "assert os.waitpid(child, 0)[1] >> 8 == 5\n" + _WORKING_MODULE
    )
    folder = _synthetic_plugin(sandbox, "forker", "forker_plugin", body)
    sandbox.write_config(sandbox.plugin_config("forker", folder / "manifest.json", "forker_plugin"))
    checked = run_cli(["check"], sandbox.environ({"PYTHONPATH": str(folder)}))
    assert checked.returncode == 0, checked.stderr
    assert "forker__ping" in checked.stdout


def test_the_same_plugin_works_under_a_free_name(sandbox: Sandbox) -> None:
    folder = _synthetic_plugin(sandbox, "pinger", "pinger_plugin", _WORKING_MODULE)
    sandbox.write_config(sandbox.plugin_config("pinger", folder / "manifest.json", "pinger_plugin"))
    checked = run_cli(["check"], sandbox.environ({"PYTHONPATH": str(folder)}))
    assert checked.returncode == 0, checked.stderr
    assert "pinger__ping" in checked.stdout


def test_unsafe_manifest_stops_startup_before_import(sandbox: Sandbox) -> None:
    marker = sandbox.root / "imported"
    body = f"open({str(marker)!r}, 'w').close()\n" + _WORKING_MODULE
    folder = _synthetic_plugin(sandbox, "unsafe", "unsafe_plugin", body)
    (folder / "manifest.json").chmod(0o666)
    sandbox.write_config(sandbox.plugin_config("unsafe", folder / "manifest.json", "unsafe_plugin"))
    line = _assert_refused(
        sandbox, {"PYTHONPATH": str(folder)}, "external_manifest_unsafe_permissions"
    )
    assert line.startswith(f"mymcp: error: {folder / 'manifest.json'}: ")
    assert "mode 0666" in line
    assert not marker.exists()


def test_import_failure_stops_startup(sandbox: Sandbox) -> None:
    body = "raise RuntimeError('secret detail /private/path')\n"
    folder = _synthetic_plugin(sandbox, "broken", "broken_plugin", body)
    sandbox.write_config(sandbox.plugin_config("broken", folder / "manifest.json", "broken_plugin"))
    line = _assert_refused(sandbox, {"PYTHONPATH": str(folder)}, "external_plugin_import_failed")
    # The operator's terminal gets the exception; the log lines never do.
    assert line == (
        "mymcp: error: plugin broken (module broken_plugin): MyMCP external plugin module "
        "could not be imported: RuntimeError: secret detail /private/path "
        "(code=external_plugin_import_failed)"
    )
    failed = run_cli([], sandbox.environ({"PYTHONPATH": str(folder)}))
    log, _ = log_and_errors(failed.stderr)
    assert "secret detail" not in "\n".join(log)


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda doc: doc.update(version="not-semver"), "manifest_invalid_field"),
        (lambda doc: doc.update(extra=1), "manifest_unknown_field"),
        (lambda doc: doc.pop("title"), "manifest_missing_field"),
    ],
)
def test_plugin_check_command(sandbox: Sandbox, mutate, code) -> None:
    manifest = sandbox.root / "manifest.json"
    document = json.loads((EXAMPLE / "manifest.json").read_text())
    manifest.write_text(json.dumps(document))
    ok = run_cli(["plugin", "check", str(manifest)], sandbox.environ())
    assert ok.returncode == 0, ok.stderr
    assert "example-plugin" in ok.stdout
    mutate(document)
    manifest.write_text(json.dumps(document))
    bad = run_cli(["plugin", "check", str(manifest)], sandbox.environ())
    assert bad.returncode == 1
    (line,) = bad.stderr.splitlines()
    # The server's own preflight code, the manifest rule that failed, and where.
    assert line.startswith(f"mymcp: error: {manifest}: ")
    assert f": {code}: " in line
    assert line.endswith("(code=external_manifest_invalid)")


def test_plugin_check_and_check_name_an_unsafe_manifest_alike(sandbox: Sandbox) -> None:
    folder = _install_example(sandbox)
    manifest = folder / "manifest.json"
    manifest.chmod(0o666)
    sandbox.write_config(sandbox.plugin_config("example-plugin", manifest, "mymcp_example_plugin"))
    plugin_check = run_cli(["plugin", "check", str(manifest)], sandbox.environ())
    check = run_cli(["check"], sandbox.environ({"PYTHONPATH": str(folder)}))
    _, said_by_check = log_and_errors(check.stderr)
    assert plugin_check.returncode == check.returncode == 1
    assert plugin_check.stderr.splitlines() == said_by_check
    assert said_by_check[0].endswith("(code=external_manifest_unsafe_permissions)")

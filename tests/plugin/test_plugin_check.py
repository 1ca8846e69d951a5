"""`mymcp plugin check` at the operator's terminal: a fault in the manifest is named with
its line and column, and a tool name the start would refuse under the plugin's declared
binding fails the check with the start's own line and code."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mymcp import cli
from mymcp.config import HostConfiguration, PluginDeclaration, load_host_configuration
from mymcp.errors import ExternalPluginLoadError
from mymcp.host import build_runtime
from mymcp.plugins.mnemosyne import MnemosyneSettings, create_mnemosyne
from tests.runtime.test_external import Workspace, importable_workspace, manifest_document

COLLISION = "external_plugin_name_collision"


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    with importable_workspace(tmp_path, monkeypatch) as space:
        yield space


def _plugin(workspace: Workspace, *local_ids: str) -> PluginDeclaration:
    document = manifest_document("fixed", tools=len(local_ids))
    for capability, local_id in zip(document["capabilities"], local_ids, strict=True):
        capability["id"] = local_id
    return workspace.plugin("fixed", manifest=document)


def _declare(
    workspace: Workspace, declaration: PluginDeclaration, binding: str, *, enabled: bool = True
) -> None:
    directory = workspace.root / "config" / "mymcp"
    directory.mkdir(parents=True, mode=0o700)
    (directory / "config.toml").write_text(
        "schema_version = 8\n[[plugins]]\n"
        f'id = "{declaration.id}"\nenabled = {str(enabled).lower()}\n'
        f'manifest_path = "{declaration.manifest_path}"\nmodule = "{declaration.module}"\n'
        f'binding = "{binding}"\n'
    )
    os.chmod(directory / "config.toml", 0o600)


def _plugin_check(
    declaration: PluginDeclaration, capsys: pytest.CaptureFixture[str], *, module: bool
) -> tuple[int, str, str]:
    assert declaration.manifest_path is not None
    assert declaration.module is not None
    argv = ["plugin", "check", str(declaration.manifest_path)]
    if module:
        argv += ["--import", declaration.module]
    status = cli.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def _start_refusal(workspace: Workspace) -> str:
    """The line a start with the workspace's host configuration fails with."""
    configuration = load_host_configuration()
    mnemosyne = create_mnemosyne(MnemosyneSettings(), environ={}, home=workspace.root / "home")
    with pytest.raises(ExternalPluginLoadError) as caught:
        build_runtime(configuration, mnemosyne)
    assert caught.value.code == COLLISION
    return f"mymcp: error: {caught.value}"


# -- tool names under the declared binding -------------------------------------------------


@pytest.mark.parametrize("module", [False, True], ids=["manifest", "--import"])
@pytest.mark.parametrize(
    "local_id",
    [
        "memory_recall",  # a Mnemosyne tool
        "memory_forget",  # a Mnemosyne tool whose gate is off: still taken
        "list_tools",  # the host's own tool
        "mymcp_status",  # reserved for the host
    ],
)
def test_a_local_name_the_start_refuses_fails_the_check_with_the_same_line(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], local_id: str, module: bool
) -> None:
    declaration = _plugin(workspace, "ping", local_id)
    _declare(workspace, declaration, "local")
    status, out, err = _plugin_check(declaration, capsys, module=module)
    assert status == 1
    assert "manifest OK: fixed" in out
    assert "module OK" not in out
    assert err.splitlines() == [_start_refusal(workspace)]
    assert f"the tool name {local_id!r} is taken" in err
    assert f"(code={COLLISION})" in err


@pytest.mark.parametrize("module", [False, True], ids=["manifest", "--import"])
def test_an_undeclared_plugin_is_warned_about_what_local_binding_would_refuse(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], module: bool
) -> None:
    declaration = _plugin(workspace, "list_tools")
    status, out, err = _plugin_check(declaration, capsys, module=module)
    assert status == 0
    (warning,) = err.splitlines()
    assert warning.startswith('mymcp: warning: declared with binding = "local", it would not')
    assert (
        f"'list_tools' is taken: only the host may use it (plugin 'fixed') (code={COLLISION})"
    ) in warning
    assert ("module OK" in out) is module


def test_a_namespaced_plugin_may_use_any_tool_id(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    declaration = _plugin(workspace, "memory_recall", "list_tools")
    _declare(workspace, declaration, "namespaced")
    status, out, err = _plugin_check(declaration, capsys, module=True)
    assert (status, err) == (0, "")
    assert "module OK" in out
    configuration = HostConfiguration(schema_version=8, plugins=(declaration,))
    mnemosyne = create_mnemosyne(MnemosyneSettings(), environ={}, home=workspace.root / "home")
    names = build_runtime(configuration, mnemosyne).registry.names
    assert "fixed__list_tools" in names  # and the start agrees


@pytest.mark.parametrize(
    ("plugin_id", "local_id", "code"),
    [
        ("mymcp", "ping", "reserved_public_name"),  # `mymcp__ping` is the host's prefix
        ("memory", "wipe_disk", "reserved_public_name"),  # `memory_*` means the bundled tools
        ("p" * 64, "t" * 64, "invalid_public_name"),  # 130 characters: MCP allows 128
    ],
)
@pytest.mark.parametrize("declared", [None, "namespaced"])
def test_a_namespaced_name_the_start_refuses_fails_the_check_with_the_same_line(
    workspace: Workspace,
    capsys: pytest.CaptureFixture[str],
    plugin_id: str,
    local_id: str,
    code: str,
    declared: str | None,
) -> None:
    document = manifest_document(plugin_id)
    document["capabilities"][0]["id"] = local_id
    declaration = workspace.plugin(plugin_id, manifest=document)
    if declared is not None:
        _declare(workspace, declaration, declared)
    status, out, err = _plugin_check(declaration, capsys, module=False)
    assert status == 1
    assert f"manifest OK: {plugin_id}" in out
    configuration = HostConfiguration(schema_version=8, plugins=(declaration,))
    mnemosyne = create_mnemosyne(MnemosyneSettings(), environ={}, home=workspace.root / "home")
    with pytest.raises(ExternalPluginLoadError) as refused:  # the start refuses it alike
        build_runtime(configuration, mnemosyne)
    assert err.splitlines() == [f"mymcp: error: {refused.value}"]
    assert refused.value.code == "external_plugin_composition_invalid"
    assert f"{code}: " in err


def test_a_plugin_refused_only_when_namespaced_passes_when_bound_locally(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    document = manifest_document("mymcp")
    document["capabilities"][0]["id"] = "ping"
    declaration = workspace.plugin("mymcp", manifest=document)
    _declare(workspace, declaration, "local")
    status, out, err = _plugin_check(declaration, capsys, module=False)
    assert (status, err) == (0, "")
    assert "manifest OK: mymcp" in out


def test_a_local_plugin_with_free_names_passes(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    declaration = _plugin(workspace, "test_simple_text")
    _declare(workspace, declaration, "local")
    status, out, err = _plugin_check(declaration, capsys, module=True)
    assert (status, err) == (0, "")
    assert "module OK" in out


def _break_configuration(workspace: Workspace) -> Path:
    config = workspace.root / "config" / "mymcp" / "config.toml"
    config.write_text(config.read_text() + "unknown = 1\n")
    return config


def test_without_a_loadable_configuration_a_collision_is_judged_as_if_undeclared(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    declaration = _plugin(workspace, "mymcp_status")
    _declare(workspace, declaration, "local")
    _break_configuration(workspace)
    status, out, err = _plugin_check(declaration, capsys, module=False)
    assert status == 0
    assert "manifest OK" in out
    # The loader's own log line comes first; then what the operator is told.
    note, warning = (line for line in err.splitlines() if line.startswith("mymcp: "))
    assert note.startswith("mymcp: note: the host configuration does not load")
    assert warning.startswith('mymcp: warning: declared with binding = "local"')


def test_a_manifest_whose_names_cannot_collide_needs_no_configuration(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    declaration = _plugin(workspace, "ping")
    _declare(workspace, declaration, "local")
    _break_configuration(workspace)
    status, out, err = _plugin_check(declaration, capsys, module=False)
    assert (status, err) == (0, "")
    assert "manifest OK" in out


# -- the manifest file itself -----------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can chown a file to another user (nobody)")
@pytest.mark.parametrize("owned", ["file", "directory"])
def test_a_manifest_owned_by_another_user_fails_the_check_as_the_start_fails(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], owned: str
) -> None:
    declaration = _plugin(workspace, "ping")
    _declare(workspace, declaration, "local")
    assert declaration.manifest_path is not None
    at_fault = declaration.manifest_path if owned == "file" else declaration.manifest_path.parent
    os.chown(at_fault, 65534, 65534)  # nobody; the mode bits stay safe
    status, out, err = _plugin_check(declaration, capsys, module=False)
    assert (status, out) == (1, "")
    assert err.startswith(f"mymcp: error: {at_fault}: ")
    assert "is owned by another user (uid 65534)" in err
    assert err.endswith("(code=external_manifest_unsafe_permissions)\n")
    configuration = load_host_configuration()
    mnemosyne = create_mnemosyne(MnemosyneSettings(), environ={}, home=workspace.root / "home")
    with pytest.raises(ExternalPluginLoadError) as caught:
        build_runtime(configuration, mnemosyne)
    assert err == f"mymcp: error: {caught.value}\n"


# -- tool definitions, judged as the start judges them ---------------------------------------

# Appended to the fixture module: its tools' definitions, changed by `CHANGE`.
_CHANGED_DEFINITIONS = """
import dataclasses

_unchanged = mymcp_plugin_v1


def mymcp_plugin_v1():
    adapter = _unchanged()
    tools = tuple(
        dataclasses.replace(t, tool=CHANGE(dict(t.tool))) for t in adapter.contribution.tools
    )
    return PluginAdapter(adapter.definition, dataclasses.replace(adapter.contribution, tools=tools))


def CHANGE(tool):
{change}
    return tool
"""


def _changed_plugin(workspace: Workspace, change: str) -> PluginDeclaration:
    extra = _CHANGED_DEFINITIONS.format(change=change)
    declaration = workspace.plugin("changed", extra=extra)
    _declare(workspace, declaration, "namespaced")
    return declaration


def _start_failure(workspace: Workspace) -> ExternalPluginLoadError | None:
    configuration = load_host_configuration()
    mnemosyne = create_mnemosyne(MnemosyneSettings(), environ={}, home=workspace.root / "home")
    try:
        build_runtime(configuration, mnemosyne)
    except ExternalPluginLoadError as exc:
        return exc
    return None


@pytest.mark.parametrize(
    "change",
    [
        '    del tool["description"]',
        '    tool["outputSchema"] = "garbage"',
        '    tool["outputSchema"] = {"type": "string"}',
        '    tool["icons"] = "nope"',
        '    tool["inputSchema"] = {"type": "object", "properties": {"a": {"pattern": "("}}}',
    ],
    ids=["no-description", "output-garbage", "output-string", "icons", "input-uncompilable"],
)
def test_a_definition_the_start_refuses_fails_the_check_with_the_same_line(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], change: str
) -> None:
    declaration = _changed_plugin(workspace, change)
    refusal = _start_failure(workspace)
    assert refusal is not None
    status, out, err = _plugin_check(declaration, capsys, module=True)
    assert status == 1
    assert "module OK" not in out
    assert f"mymcp: error: {refusal}" in err.splitlines()
    assert "changed:tool:tool_0" in err  # the line names the plugin's tool


def test_a_tool_without_an_input_schema_passes_as_it_starts(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    # The start publishes a schema that takes no arguments; the check agrees.
    declaration = _changed_plugin(workspace, '    del tool["inputSchema"]')
    assert _start_failure(workspace) is None
    status, out, err = _plugin_check(declaration, capsys, module=True)
    assert (status, err) == (0, "")
    assert "module OK" in out


def test_members_the_host_does_not_publish_are_named_as_warnings(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    change = '    tool["annotations"] = {"readOnlyHint": True}\n    tool["_meta"] = {"x": 1}'
    declaration = _changed_plugin(workspace, change)
    assert _start_failure(workspace) is None  # dropped, not refused
    status, out, err = _plugin_check(declaration, capsys, module=True)
    assert status == 0
    assert "module OK" in out
    assert err.splitlines() == [
        "mymcp: warning: tool tool_0: 'annotations' is left out of the published definition: "
        "the host writes each tool's annotations from its declared effects "
        "(code=tool_member_unpublished)",
        "mymcp: warning: tool tool_0: '_meta' is left out of the published definition: the "
        "host publishes only title, description, inputSchema, outputSchema and icons "
        "(code=tool_member_unpublished)",
    ]


def test_a_plugin_with_the_bundled_plugins_id_fails_the_check(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    declaration = workspace.plugin("mnemosyne")
    status, out, err = _plugin_check(declaration, capsys, module=False)
    assert status == 1
    assert "manifest OK" not in out
    assert "code=bundled_plugin_conflict" in err


@pytest.mark.parametrize("module", [False, True], ids=["manifest", "--import"])
def test_a_read_only_destructive_tool_fails_the_check_as_the_start_fails(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], module: bool
) -> None:
    # Both read the manifest with the one validator, so both refuse the tool that a
    # policy's `@read_only` and `@destructive` would each match.
    document = manifest_document("fixed", tools=2)
    document["capabilities"][1].update(read_only=True, destructive=True)
    declaration = workspace.plugin("fixed", manifest=document)
    _declare(workspace, declaration, "namespaced")
    refusal = _start_failure(workspace)
    assert refusal is not None
    assert refusal.code == "external_manifest_invalid"
    status, out, err = _plugin_check(declaration, capsys, module=module)
    assert (status, out) == (1, "")
    assert err == f"mymcp: error: {refusal}\n"
    assert err.startswith(
        f"mymcp: error: {declaration.manifest_path}: capabilities[1].destructive: "
    )
    assert "manifest_invalid_field: a read-only tool cannot be destructive" in err


# -- numbers JSON cannot hold --------------------------------------------------------------


def _manifest_with(tmp_path: Path, key: str, token: str) -> tuple[Path, int, int]:
    """A manifest whose `key` holds `token` verbatim, and the line and column of it."""
    document = manifest_document("fixed")
    marker = "@@token@@"
    if key == "max":
        document["requires"]["host_api"]["max"] = marker
    else:
        document[key] = marker
    text = json.dumps(document, indent=2)
    index = text.index(f'"{marker}"')
    line = text.count("\n", 0, index) + 1
    column = index - text.rfind("\n", 0, index)
    path = tmp_path / "manifest.json"
    path.write_text(text.replace(f'"{marker}"', token))
    os.chmod(path, 0o644)
    return path, line, column


@pytest.mark.parametrize(
    ("key", "token"),
    [
        ("version", "NaN"),
        ("data_schema_version", "-Infinity"),
        ("max", "1e400"),
        ("max", "-2.5E+999"),
        ("max", "9" * 5000),  # more digits than an integer may have
    ],
)
def test_a_number_json_cannot_hold_is_named_with_its_line_and_column(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    key: str,
    token: str,
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path, line, column = _manifest_with(tmp_path, key, token)
    assert cli.main(["plugin", "check", str(path)]) == 1
    (error,) = capsys.readouterr().err.splitlines()
    assert error.startswith(f"mymcp: error: {path}:{line}:{column}: ")
    assert "manifest_resource_invalid_json" in error
    assert error.endswith("(code=external_manifest_invalid)")
    if token.startswith("9"):
        assert "9" * 20 not in error  # the place is named, the content is not repeated
    else:
        assert "not a finite number" in error


def test_a_required_setting_without_any_entry_says_the_entry_is_missing(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    # No `[[plugins]]` entry has the manifest's id (none declared, or the id mistyped):
    # the check names that, not an entry that does not exist.
    document = manifest_document("fixed", tools=1)
    document["configuration"] = {
        "schema_version": 1,
        "schema": {
            "type": "object",
            "properties": {"owner": {"type": "string"}},
            "required": ["owner"],
            "additionalProperties": False,
        },
    }
    declaration = workspace.plugin("fixed", manifest=document)
    status, _, err = _plugin_check(declaration, capsys, module=True)
    assert status == 1
    assert "no [[plugins]] entry has id 'fixed'" in err
    assert "owner: required by the plugin, but missing" in err
    assert "plugins[?]" not in err


@pytest.mark.parametrize("module", ["bad-name", "", "../x", "class.x", "a..b"])
def test_import_takes_only_what_a_plugins_entry_could_name(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], module: str
) -> None:
    # Anything else is a usage error, as the configuration would refuse it: never an
    # import attempt (a relative or empty name only fails inside importlib).
    declaration = _plugin(workspace, "ping")
    with pytest.raises(SystemExit) as leaving:
        cli.main(["plugin", "check", str(declaration.manifest_path), "--import", module])
    assert leaving.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --import: not a module name: {module!r}" in err
    assert "could not be imported" not in err


def test_an_import_check_fails_as_the_start_does_when_the_entry_names_another_id(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    # The entry names this manifest under another id: the start refuses the manifest,
    # and the check that imports the plugin as the start would refuses it too.
    declaration = _plugin(workspace, "ping")
    _declare(
        workspace,
        PluginDeclaration("renamed", True, declaration.manifest_path, declaration.module),
        "namespaced",
    )
    status, _, err = _plugin_check(declaration, capsys, module=True)
    assert status == 1
    assert "(code=external_manifest_identity_mismatch)" in err
    assert "the manifest says 'fixed', the [[plugins]] entry 'renamed'" in err
    assert declaration.module not in sys.modules  # refused before any import


@pytest.mark.parametrize("module", [False, True], ids=["manifest", "--import"])
def test_a_disabled_entry_s_refused_name_is_a_warning_as_the_start_passes_it_over(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], module: bool
) -> None:
    declaration = _plugin(workspace, "list_tools")
    _declare(workspace, declaration, "local", enabled=False)
    status, out, err = _plugin_check(declaration, capsys, module=module)
    assert status == 0
    assert "manifest OK: fixed" in out
    (warning,) = err.splitlines()
    assert warning.startswith(
        "mymcp: warning: plugins[0] is disabled; enabled, it would not start: "
    )
    assert warning.endswith(f"(code={COLLISION})")
    assert cli.main(["check"]) == 0  # the start passes it over indeed


def test_an_import_check_says_when_the_entry_loads_another_module_or_manifest(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    # The check imports what it is given; the server, what the entry names. Different,
    # the check's verdict is not the start's, and it says so.
    declaration = _plugin(workspace, "ping")
    elsewhere = workspace.root / "elsewhere" / "manifest.json"
    _declare(
        workspace,
        PluginDeclaration("fixed", True, elsewhere, "fixed_renamed"),
        "namespaced",
    )
    status, out, err = _plugin_check(declaration, capsys, module=True)
    assert status == 0, err
    assert "module OK: " in out
    source = workspace.root / "config" / "mymcp" / "config.toml"
    assert err.splitlines() == [
        f"mymcp: warning: {source}: plugins[0].module: the server imports "
        f'"fixed_renamed", not "{declaration.module}": this check is of a module the '
        "server does not load",
        f"mymcp: warning: {source}: plugins[0].manifest_path: the server reads {elsewhere}, "
        f"not {declaration.manifest_path}: this check is of a manifest the server does not "
        "read",
    ]

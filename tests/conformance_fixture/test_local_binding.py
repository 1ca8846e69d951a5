"""`[[plugins]] binding = "local"` (schema 8): a trusted plugin's tools under their own ids.

This is the production switch `scripts/conformance` uses to serve the suite's fixture
tools by the names the suite calls. A local name may never shadow another tool or a
name reserved for the host: such a configuration is refused at startup with one code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from mymcp.config import HostConfiguration, PluginDeclaration, parse_host_configuration
from mymcp.errors import ConfigurationError, ExternalPluginLoadError
from mymcp.host import build_runtime
from mymcp.plugins.mnemosyne import MnemosyneSettings, create_mnemosyne
from tests.runtime.test_external import Workspace, importable_workspace, manifest_document

COLLISION = "external_plugin_name_collision"


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    with importable_workspace(tmp_path, monkeypatch) as space:
        yield space


def _tools(plugin_id: str, *local_ids: str) -> dict[str, object]:
    document = manifest_document(plugin_id, tools=len(local_ids))
    capabilities = document["capabilities"]
    assert isinstance(capabilities, list)
    for capability, local_id in zip(capabilities, local_ids, strict=True):
        capability["id"] = local_id
    return document


def _runtime(workspace: Workspace, *declarations: PluginDeclaration) -> list[str]:
    configuration = HostConfiguration(schema_version=8, plugins=declarations)
    mnemosyne = create_mnemosyne(MnemosyneSettings(), environ={}, home=workspace.root / "home")
    runtime = build_runtime(configuration, mnemosyne)
    return list(runtime.registry.names)


def _local(declaration: PluginDeclaration) -> PluginDeclaration:
    return dataclasses.replace(declaration, binding="local")


def _config(binding: str | None, schema: int = 8) -> bytes:
    line = "" if binding is None else f'binding = "{binding}"\n'
    return (
        f'schema_version = {schema}\n[[plugins]]\nid = "fixture"\nenabled = true\n'
        f'manifest_path = "/opt/fixture/manifest.json"\nmodule = "fixture_module"\n{line}'
    ).encode()


def test_binding_is_read_from_schema_8_and_defaults_to_namespaced() -> None:
    assert parse_host_configuration(_config("local")).plugins[0].binding == "local"
    assert parse_host_configuration(_config("namespaced")).plugins[0].binding == "namespaced"
    assert parse_host_configuration(_config(None)).plugins[0].binding == "namespaced"


@pytest.mark.parametrize(
    ("binding", "schema", "where"),
    [
        ("global", 8, "plugins[0].binding"),
        ("Local", 8, "plugins[0].binding"),
        ("local", 7, "plugins[0].binding"),  # no such key before schema 8
    ],
)
def test_other_binding_values_are_refused(binding: str, schema: int, where: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_host_configuration(_config(binding, schema))
    assert caught.value.code == "invalid_schema"
    assert f"{where}:" in str(caught.value)


def test_local_plugin_tools_keep_their_ids_and_others_stay_namespaced(
    workspace: Workspace,
) -> None:
    local = _local(workspace.plugin("fixed", manifest=_tools("fixed", "test_simple_text")))
    other = workspace.plugin("other", manifest=_tools("other", "test_simple_text"))
    names = _runtime(workspace, local, other)
    assert names[0] == "list_tools"
    assert "memory_recall" in names
    assert names[-2:] == ["test_simple_text", "other__test_simple_text"]


@pytest.mark.parametrize(
    "local_id",
    [
        "memory_recall",  # a Mnemosyne tool
        "memory_forget",  # a Mnemosyne tool whose gate is off: still refused
        "list_tools",  # the host's own tool
        "mymcp_status",  # reserved for the host
    ],
)
def test_a_local_name_that_collides_is_refused(workspace: Workspace, local_id: str) -> None:
    declaration = _local(workspace.plugin("fixed", manifest=_tools("fixed", local_id)))
    with pytest.raises(ExternalPluginLoadError) as caught:
        _runtime(workspace, declaration)
    assert caught.value.code == COLLISION


def test_a_collision_the_manifests_show_stops_the_start_before_any_plugin_code_runs(
    workspace: Workspace,
) -> None:
    ran = workspace.root / "imported"
    marker = f"import pathlib\npathlib.Path({str(ran)!r}).write_text('ran')\n"
    innocent = workspace.plugin("innocent", extra=marker)  # declared first, imported first
    clashing = _local(
        workspace.plugin("fixed", manifest=_tools("fixed", "memory_forget"), extra=marker)
    )
    with pytest.raises(ExternalPluginLoadError) as caught:
        _runtime(workspace, innocent, clashing)
    assert caught.value.code == COLLISION
    assert not ran.exists()  # neither module was imported
    # The entry whose `binding` made the clash is named.
    assert caught.value.location.key == "plugins[1].binding"


def test_a_module_declared_twice_is_named_with_the_configuration_s_file_and_line(
    workspace: Workspace,
) -> None:
    first = workspace.plugin("first")
    second = dataclasses.replace(workspace.plugin("second"), module=first.module)
    source = workspace.root / "config.toml"
    source.write_text(
        "schema_version = 8\n"
        + "".join(
            f'[[plugins]]\nid = "{p.id}"\nenabled = true\n'
            f'manifest_path = "{p.manifest_path}"\nmodule = "{p.module}"\n'
            for p in (first, second)
        )
    )
    configuration = HostConfiguration(schema_version=8, plugins=(first, second), source=source)
    mnemosyne = create_mnemosyne(MnemosyneSettings(), environ={}, home=workspace.root / "home")
    with pytest.raises(ExternalPluginLoadError) as caught:
        build_runtime(configuration, mnemosyne)
    where = caught.value.location
    assert (where.source, where.key, where.line) == (str(source), "plugins[1].module", 11)


def test_two_local_plugins_with_one_tool_id_are_refused(workspace: Workspace) -> None:
    first = _local(workspace.plugin("first", manifest=_tools("first", "shared")))
    second = _local(workspace.plugin("second", manifest=_tools("second", "shared")))
    with pytest.raises(ExternalPluginLoadError) as caught:
        _runtime(workspace, first, second)
    assert caught.value.code == COLLISION
    # Both plugins are named: the operator must see which entry already holds the name.
    assert caught.value.diagnostic.detail == (
        "the tool name 'shared' is taken: plugin 'first' publishes it, and plugin 'second' "
        "would too"
    )


def test_a_namespaced_plugin_may_use_a_mnemosyne_tool_id(workspace: Workspace) -> None:
    declaration = workspace.plugin("alpha", manifest=_tools("alpha", "memory_recall"))
    assert "alpha__memory_recall" in _runtime(workspace, declaration)

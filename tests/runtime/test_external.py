"""External plugins: preflight of every manifest, then import, entrypoint and parity."""

from __future__ import annotations

import inspect
import itertools
import json
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import mymcp._safefile as safefile
from mymcp.config import PluginDeclaration, load_host_configuration, validate_semantics
from mymcp.errors import ExternalPluginLoadError, StopRequested
from mymcp.plugin import PluginAdapter
from mymcp.runtime._external import load_external_plugins

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = REPO / "examples" / "example_plugin"
_names = itertools.count()

CAPABILITY = {
    "kind": "tool",
    "version": "1.0.0",
    "read_only": True,
    "destructive": False,
    "idempotent": True,
    "open_world": False,
    "consent": "none",
}


def manifest_document(plugin_id: str, tools: int = 1, **overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "manifest_version": 1,
        "id": plugin_id,
        "title": "Fixture plugin",
        "description": "A plugin written by the test.",
        "version": "1.0.0",
        "requires": {"host_api": {"min": 1, "max": 1}},
        "capabilities": [{**CAPABILITY, "id": f"tool_{i}"} for i in range(tools)],
        "configuration": {
            "schema_version": 1,
            "schema": {"type": "object", "properties": {}, "additionalProperties": False},
        },
        "secret_references": [],
        "data_schema_version": 1,
        "authority": {"filesystem": [], "network": False},
    }
    document.update(overrides)
    return document


# The fixture plugin builds its definition with the public parser from a dict and
# returns its read-only tools; `extra` appends source, `version` overrides the version.
MODULE_TEMPLATE = """
from mymcp.plugin import (
    ActivatedTool, PluginAdapter, PluginContribution, QualifiedCapabilityId,
    manifest_from_mapping, structured_result,
)

MANIFEST = {manifest}
VERSION_OVERRIDE = {version}


def _handler(arguments):
    return structured_result({{"ok": True}})


def mymcp_plugin_v1():
    definition = manifest_from_mapping(MANIFEST)
    tools = tuple(
        ActivatedTool(
            capability=QualifiedCapabilityId(definition.plugin_id, "tool", c.local_id),
            tool={{"description": c.local_id, "title": c.local_id,
                   "inputSchema": {{"type": "object", "additionalProperties": False}}}},
            handler=_handler,
            effects=c.effects,
            consent=c.consent,
        )
        for c in definition.capabilities
    )
    version = VERSION_OVERRIDE or definition.version
    return PluginAdapter(definition, PluginContribution(definition.plugin_id, version, tools))

{extra}
"""


@dataclass
class Workspace:
    """A private module directory on sys.path plus safe manifest files."""

    root: Path
    created_modules: list[str] = field(default_factory=list)

    def plugin(
        self,
        plugin_id: str = "fixture-plugin",
        *,
        tools: int = 1,
        manifest: dict[str, Any] | None = None,
        module_manifest: dict[str, Any] | None = None,
        source: str | None = None,
        extra: str = "",
        version: str | None = None,
        enabled: bool = True,
    ) -> PluginDeclaration:
        """Write a manifest and a module; returns the matching declaration."""
        module = f"mymcp_fixture_{next(_names)}_{os.getpid()}"
        document = manifest if manifest is not None else manifest_document(plugin_id, tools)
        directory = self.root / "manifests" / module
        directory.mkdir(parents=True, mode=0o755)
        path = directory / "manifest.json"
        path.write_text(json.dumps(document))
        os.chmod(path, 0o644)
        if source is None:
            source = MODULE_TEMPLATE.format(
                manifest=repr(module_manifest if module_manifest is not None else document),
                version=repr(version),
                extra=extra,
            )
        (self.root / "modules" / f"{module}.py").write_text(source)
        self.created_modules.append(module)
        return PluginDeclaration(plugin_id, enabled, path, module)


@contextmanager
def importable_workspace(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    """A workspace under `root` with a home directory, whose plugin modules import while
    it is open and are forgotten after."""
    (root / "modules").mkdir()
    (root / "home").mkdir()
    monkeypatch.syspath_prepend(str(root / "modules"))
    space = Workspace(root)
    try:
        yield space
    finally:
        for name in space.created_modules:
            sys.modules.pop(name, None)


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    (tmp_path / "modules").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    monkeypatch.syspath_prepend(str(EXAMPLE_DIR))
    space = Workspace(tmp_path)
    yield space
    for name in [*space.created_modules, "mymcp_example_plugin"]:
        sys.modules.pop(name, None)


def _code(declarations: list[PluginDeclaration]) -> str:
    with pytest.raises(ExternalPluginLoadError) as caught:
        load_external_plugins(declarations)
    error = caught.value
    assert error.message == ExternalPluginLoadError.messages()[error.code]
    assert error.__cause__ is None  # no exception text leaks through chaining
    assert error.__suppress_context__
    return error.code


def _example_manifest(workspace: Workspace) -> Path:
    """The packaged example manifest, copied with safe modes whatever the checkout's umask."""
    directory = workspace.root / "example"
    directory.mkdir(mode=0o755, exist_ok=True)
    os.chmod(directory, 0o755)  # noqa: S103 - readable, not writable
    path = directory / "manifest.json"
    path.write_bytes((EXAMPLE_DIR / "manifest.json").read_bytes())
    os.chmod(path, 0o644)
    return path


def _example_declaration(workspace: Workspace, enabled: bool = True) -> PluginDeclaration:
    return PluginDeclaration(
        "example-plugin", enabled, _example_manifest(workspace), "mymcp_example_plugin"
    )


# --- the example plugin ----------------------------------------------------------------


def test_example_plugin_loads(workspace: Workspace) -> None:
    (adapter,) = load_external_plugins([_example_declaration(workspace)])
    assert adapter.definition.plugin_id == "example-plugin"
    echo, word_count = adapter.contribution.tools
    assert echo.capability.local_id == "echo"
    assert echo.effects.read_only
    assert word_count.effects.read_only
    for tool in (echo, word_count):
        definition = tool.definition()
        assert definition["description"]
        assert definition["title"]
        assert definition["inputSchema"]["type"] == "object"
        assert definition["inputSchema"]["additionalProperties"] is False
    assert echo.handler({"text": "hi there"})["structuredContent"] == {"text": "hi there"}
    counted = word_count.handler({"text": "one two  three"})
    assert counted["structuredContent"] == {"words": 3, "characters": 14}
    assert counted["content"][0]["text"] == '{"words":3,"characters":14}'
    assert word_count.handler({"text": 5})["isError"] is True


@pytest.mark.parametrize("version", range(2, 8))
def test_example_plugin_through_a_configuration(
    workspace: Workspace, tmp_path: Path, version: int
) -> None:
    lines = [f"schema_version = {version}"]
    if version >= 3:  # plugins combine with any authentication configuration
        lines += ["[authentication]", "anonymous_enabled = false"]
        if version >= 4:
            lines += [
                "[[authentication.adapters]]",
                'id = "local"',
                'type = "operator-bearer-v1"',
                "enabled = true",
                'route = { source = "authorization", scheme = "bearer" }',
                "[authentication.operator_bearer]",
                'verifier_path = "/etc/mymcp/verifier.json"',
            ]
    if version == 6:
        lines += ["[mcp]", "strict_protocol_version = true"]
    if version == 7:
        lines += [
            "[mcp]",
            "strict_protocol_version = true",
            "session_inactivity_timeout_seconds = 60",
            "session_absolute_lifetime_seconds = 0",
        ]
    lines += [
        "[[plugins]]",
        'id = "example-plugin"',
        "enabled = true",
        f"manifest_path = {json.dumps(str(_example_manifest(workspace)))}",
        'module = "mymcp_example_plugin"',
    ]
    # [[plugins]] after the other tables: TOML tables must not be reopened
    directory = tmp_path / "xdg" / "mymcp"
    directory.mkdir(parents=True, mode=0o700)
    (directory / "config.toml").write_text("\n".join(lines) + "\n")
    os.chmod(directory / "config.toml", 0o600)
    config = load_host_configuration({"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    validate_semantics(config)
    (adapter,) = load_external_plugins(config.plugins)
    assert [t.capability.local_id for t in adapter.contribution.tools] == ["echo", "word_count"]


def test_disabled_declarations_are_never_touched(workspace: Workspace) -> None:
    ghost = PluginDeclaration("ghost", False, Path("/nonexistent/manifest.json"), "no_such_mod")
    assert load_external_plugins([ghost]) == ()
    assert load_external_plugins([ghost, _example_declaration(workspace, enabled=False)]) == ()
    assert "mymcp_example_plugin" not in sys.modules


def test_adapters_keep_declaration_order(workspace: Workspace) -> None:
    declarations = [
        workspace.plugin("zeta"),
        workspace.plugin("alpha", enabled=False),
        workspace.plugin("beta", tools=2),
    ]
    adapters = load_external_plugins(declarations)
    assert [a.definition.plugin_id for a in adapters] == ["zeta", "beta"]
    assert all(isinstance(a, PluginAdapter) for a in adapters)


# --- preflight: manifests --------------------------------------------------------------


def test_every_manifest_is_preflighted_before_any_import(workspace: Workspace) -> None:
    first = workspace.plugin("first")
    broken = workspace.plugin("second", manifest={"manifest_version": 1})
    assert _code([first, broken]) == "external_manifest_invalid"
    assert first.module not in sys.modules


def test_identity_mismatch(workspace: Workspace) -> None:
    declaration = workspace.plugin("declared-id", manifest=manifest_document("manifest-id"))
    assert _code([declaration]) == "external_manifest_identity_mismatch"
    assert declaration.module not in sys.modules


def test_host_api_incompatible(workspace: Workspace) -> None:
    document = manifest_document("future", requires={"host_api": {"min": 2, "max": 3}})
    assert _code([workspace.plugin("future", manifest=document)]) == (
        "external_manifest_host_api_incompatible"
    )


def test_manifest_unsafe_path(workspace: Workspace, tmp_path: Path) -> None:
    declaration = workspace.plugin()
    assert declaration.manifest_path is not None
    real = tmp_path / "elsewhere.json"
    real.write_bytes(declaration.manifest_path.read_bytes())
    declaration.manifest_path.unlink()
    declaration.manifest_path.symlink_to(real)
    assert _code([declaration]) == "external_manifest_unsafe_path"


def test_manifest_not_regular(workspace: Workspace) -> None:
    declaration = workspace.plugin()
    assert declaration.manifest_path is not None
    declaration.manifest_path.unlink()
    declaration.manifest_path.mkdir()
    assert _code([declaration]) == "external_manifest_not_regular"


def test_manifest_unsafe_permissions(workspace: Workspace) -> None:
    declaration = workspace.plugin()
    assert declaration.manifest_path is not None
    os.chmod(declaration.manifest_path, 0o664)
    assert _code([declaration]) == "external_manifest_unsafe_permissions"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can chown a file to another user (nobody)")
@pytest.mark.parametrize("owned", ["file", "directory"])
def test_manifest_owned_by_another_user(workspace: Workspace, owned: str) -> None:
    declaration = workspace.plugin()
    assert declaration.manifest_path is not None
    at_fault = declaration.manifest_path if owned == "file" else declaration.manifest_path.parent
    os.chown(at_fault, 65534, 65534)  # nobody; the mode bits stay safe
    assert _code([declaration]) == "external_manifest_unsafe_permissions"
    assert declaration.module not in sys.modules  # refused before any import


def test_manifest_unreadable_when_missing(workspace: Workspace) -> None:
    declaration = workspace.plugin()
    assert declaration.manifest_path is not None
    declaration.manifest_path.unlink()
    assert _code([declaration]) == "external_manifest_unreadable"


def test_manifest_too_large(workspace: Workspace) -> None:
    declaration = workspace.plugin()
    assert declaration.manifest_path is not None
    declaration.manifest_path.write_bytes(b" " * 65537)
    assert _code([declaration]) == "external_manifest_too_large"


def test_manifest_source_changed(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    declaration = workspace.plugin()
    path = declaration.manifest_path
    assert path is not None
    real_read = os.read
    edits: list[int] = []

    def read_then_edit(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        if not edits:
            edits.append(n)
            with path.open("a") as handle:
                handle.write(" ")
        return data

    monkeypatch.setattr(safefile.os, "read", read_then_edit)
    assert _code([declaration]) == "external_manifest_source_changed"


def test_manifest_invalid(workspace: Workspace) -> None:
    declaration = workspace.plugin()
    assert declaration.manifest_path is not None
    declaration.manifest_path.write_text('{"id": "a", "id": "a"}')
    assert _code([declaration]) == "external_manifest_invalid"


def test_schema1_style_declaration_cannot_be_loaded() -> None:
    assert _code([PluginDeclaration("legacy", True)]) == "external_manifest_invalid"


# --- limits and duplicates -------------------------------------------------------------


def test_more_than_32_enabled_plugins(workspace: Workspace) -> None:
    declarations = [
        PluginDeclaration(f"p{i}", True, Path(f"/nonexistent/{i}.json"), f"m{i}") for i in range(33)
    ]
    assert _code(declarations) == "external_plugin_limit_exceeded"


def test_disabled_plugins_do_not_count_towards_the_limit(workspace: Workspace) -> None:
    disabled = [
        PluginDeclaration(f"p{i}", False, Path(f"/nonexistent/{i}.json"), f"m{i}")
        for i in range(40)
    ]
    assert len(load_external_plugins([*disabled, workspace.plugin("real")])) == 1


def test_more_than_256_capabilities(workspace: Workspace) -> None:
    declarations = [workspace.plugin(f"big-{i}", tools=64) for i in range(4)]
    declarations.append(workspace.plugin("one-more", tools=1))
    assert _code(declarations) == "external_plugin_limit_exceeded"
    assert not any(d.module in sys.modules for d in declarations)


def test_exactly_256_capabilities_load(workspace: Workspace) -> None:
    adapters = load_external_plugins([workspace.plugin(f"big-{i}", tools=64) for i in range(4)])
    assert sum(len(a.contribution.tools) for a in adapters) == 256


def test_duplicate_module_names(workspace: Workspace) -> None:
    first = workspace.plugin("first")
    second = workspace.plugin("second")
    clash = PluginDeclaration("second", True, second.manifest_path, first.module)
    assert _code([first, clash]) == "external_plugin_composition_invalid"
    assert first.module not in sys.modules


# --- import and entrypoint -------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "raise RuntimeError('/secret/path in message')\n",
        "def broken(:\n",
        "import no_such_dependency_for_mymcp_tests\n",
        "raise SystemExit(3)\n",
        "raise GeneratorExit('x')\n",
        "class Stop(BaseException):\n    pass\nraise Stop()\n",
    ],
    ids=[
        "raises",
        "syntax-error",
        "missing-dependency",
        "system-exit",
        "generator-exit",
        "own-base-exception",
    ],
)
def test_import_failed(workspace: Workspace, source: str) -> None:
    assert _code([workspace.plugin(source=source)]) == "external_plugin_import_failed"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # What a real Ctrl-C does while the plugin imports.
        ("import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n", KeyboardInterrupt),
        # What the SIGTERM handler raises.
        ("from mymcp.errors import StopRequested\nraise StopRequested(0)\n", StopRequested),
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stop_during_the_import_is_no_failure_of_the_plugin(
    workspace: Workspace, source: str, expected: type[BaseException]
) -> None:
    # The process is being stopped, which must not be reported as the plugin's fault.
    with pytest.raises(expected):
        load_external_plugins([workspace.plugin(source=source)])


@pytest.mark.parametrize("where", ["import", "entrypoint"])
def test_a_keyboard_interrupt_the_plugin_raises_itself_is_its_failure(
    workspace: Workspace, where: str
) -> None:
    # Nobody pressed Ctrl-C: a plugin raising KeyboardInterrupt is a plugin that failed.
    raising = "raise KeyboardInterrupt('plugin bug')\n"
    if where == "import":
        assert _code([workspace.plugin(source=raising)]) == "external_plugin_import_failed"
    else:
        source = "def mymcp_plugin_v1():\n    " + raising
        assert _code([workspace.plugin(source=source)]) == "external_plugin_entrypoint_invalid"


def test_missing_module_is_an_import_failure(workspace: Workspace) -> None:
    declaration = workspace.plugin()
    (workspace.root / "modules" / f"{declaration.module}.py").unlink()
    assert _code([declaration]) == "external_plugin_import_failed"


@pytest.mark.parametrize(
    "source",
    [
        "VALUE = 1\n",
        "mymcp_plugin_v1 = 3\n",
        "def mymcp_plugin_v1():\n    raise ValueError('boom')\n",
        "def mymcp_plugin_v1(configuration, more):\n    return None\n",
        "class Stop(BaseException):\n    pass\ndef mymcp_plugin_v1():\n    raise Stop()\n",
    ],
    ids=["missing", "not-callable", "raises", "needs-two-arguments", "raises-base-exception"],
)
def test_entrypoint_invalid(workspace: Workspace, source: str) -> None:
    assert _code([workspace.plugin(source=source)]) == "external_plugin_entrypoint_invalid"


@pytest.mark.parametrize(
    "source",
    [
        "def mymcp_plugin_v1():\n    return None\n",
        "def mymcp_plugin_v1():\n    return {'definition': 1, 'contribution': 2}\n",
        "from mymcp.plugin import manifest_from_mapping\n"
        "def mymcp_plugin_v1():\n    return manifest_from_mapping(MANIFEST)\n",
    ],
    ids=["none", "dict", "definition-only"],
)
def test_contract_invalid(workspace: Workspace, source: str) -> None:
    if "MANIFEST" in source:
        source = f"MANIFEST = {manifest_document('fixture-plugin')!r}\n" + source
    declaration = workspace.plugin(source=source)
    assert _code([declaration]) == "external_plugin_contract_invalid"


def test_async_entrypoint_is_a_contract_failure_without_warnings(workspace: Workspace) -> None:
    source = "async def mymcp_plugin_v1():\n    return None\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _code([workspace.plugin(source=source)]) == "external_plugin_contract_invalid"
    assert inspect.iscoroutinefunction(sys.modules[workspace.created_modules[-1]].mymcp_plugin_v1)


# --- parity ----------------------------------------------------------------------------


def test_version_parity_failure_is_a_composition_failure(workspace: Workspace) -> None:
    declaration = workspace.plugin(version="9.9.9")
    assert _code([declaration]) == "external_plugin_composition_invalid"


def test_definition_mismatch_is_a_composition_failure(workspace: Workspace) -> None:
    on_disk = manifest_document("fixture-plugin")
    in_code = manifest_document("fixture-plugin", title="Another title")
    declaration = workspace.plugin(manifest=on_disk, module_manifest=in_code)
    assert _code([declaration]) == "external_plugin_composition_invalid"


def test_the_message_is_content_free_and_the_terminal_text_names_plugin_and_cause(
    workspace: Workspace,
) -> None:
    declaration = workspace.plugin(source="raise RuntimeError('boom')\n")
    with pytest.raises(ExternalPluginLoadError) as caught:
        load_external_plugins([declaration])
    error = caught.value
    assert error.message == "MyMCP external plugin module could not be imported"
    assert str(error) == (
        f"plugin {declaration.id} (module {declaration.module}): MyMCP external plugin "
        "module could not be imported: RuntimeError: boom (code=external_plugin_import_failed)"
    )


# --- the operator's configuration for a plugin -------------------------------------------

CONFIGURED_SCHEMA = {
    "type": "object",
    "properties": {
        "greeting": {"type": "string"},
        "limits": {
            "type": "object",
            "properties": {"max_items": {"type": "integer"}},
            "required": ["max_items"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["greeting"],
    "additionalProperties": False,
}

# An entrypoint that takes the configuration and publishes it as its tool's description.
CONFIGURED_SOURCE = """
import json
from mymcp.plugin import (
    ActivatedTool, PluginAdapter, PluginContribution, QualifiedCapabilityId,
    manifest_from_mapping, structured_result,
)

MANIFEST = {manifest}
RECEIVED = []


def mymcp_plugin_v1(configuration):
    RECEIVED.append(configuration)
    definition = manifest_from_mapping(MANIFEST)
    (c,) = definition.capabilities
    tool = ActivatedTool(
        capability=QualifiedCapabilityId(definition.plugin_id, "tool", c.local_id),
        tool={{"description": json.dumps(configuration, sort_keys=True),
               "inputSchema": {{"type": "object"}}}},
        handler=lambda arguments: structured_result({{}}),
        effects=c.effects,
        consent=c.consent,
    )
    return PluginAdapter(definition, PluginContribution(definition.plugin_id, "1.0.0", (tool,)))
"""


def _configured(workspace: Workspace, values: dict[str, Any]) -> PluginDeclaration:
    document = manifest_document(
        "configured", configuration={"schema_version": 1, "schema": CONFIGURED_SCHEMA}
    )
    declaration = workspace.plugin(
        "configured", manifest=document, source=CONFIGURED_SOURCE.format(manifest=repr(document))
    )
    return PluginDeclaration(
        declaration.id, True, declaration.manifest_path, declaration.module, values
    )


def test_the_entrypoint_receives_the_validated_configuration(workspace: Workspace) -> None:
    values = {"greeting": "hi", "limits": {"max_items": 3}, "tags": ["a", "b"]}
    (adapter,) = load_external_plugins([_configured(workspace, values)])
    received = sys.modules[workspace.created_modules[-1]].RECEIVED
    assert received == [values]
    assert json.loads(adapter.contribution.tools[0].tool["description"]) == values


@pytest.mark.parametrize(
    ("values", "key", "detail"),
    [
        ({}, "plugins[0].configuration.greeting", "required by the plugin, but missing"),
        (
            {"greeting": 5},
            "plugins[0].configuration.greeting",
            "expected a string, got 5 (an integer)",
        ),
        (
            {"greeting": "x", "colour": "red"},
            "plugins[0].configuration.colour",
            "unknown key; the plugin takes greeting, limits, tags",
        ),
        (
            {"greeting": "x", "limits": {}},
            "plugins[0].configuration.limits.max_items",
            "required by the plugin, but missing",
        ),
        (
            {"greeting": "x", "limits": {"max_items": True}},
            "plugins[0].configuration.limits.max_items",
            "expected an integer, got true (a boolean)",
        ),
        (
            {"greeting": "x", "tags": ["a", 2]},
            "plugins[0].configuration.tags[1]",
            "expected a string, got 2 (an integer)",
        ),
    ],
)
def test_configuration_that_breaks_the_declared_schema_fails_before_any_import(
    workspace: Workspace, values: dict[str, Any], key: str, detail: str
) -> None:
    declaration = _configured(workspace, values)
    source = workspace.root / "config.toml"
    with pytest.raises(ExternalPluginLoadError) as caught:
        load_external_plugins([declaration], source)
    error = caught.value
    assert error.code == "external_plugin_configuration_invalid"
    assert (error.location.source, error.location.key, error.detail) == (str(source), key, detail)
    assert declaration.module not in sys.modules


def test_configuration_for_an_entrypoint_without_a_parameter_is_refused(
    workspace: Workspace,
) -> None:
    document = manifest_document(
        "plain", configuration={"schema_version": 1, "schema": CONFIGURED_SCHEMA}
    )
    plain = workspace.plugin("plain", manifest=document)  # mymcp_plugin_v1() takes nothing
    declaration = PluginDeclaration(
        plain.id, True, plain.manifest_path, plain.module, {"greeting": "hi"}
    )
    with pytest.raises(ExternalPluginLoadError) as caught:
        load_external_plugins([declaration])
    assert caught.value.code == "external_plugin_entrypoint_invalid"
    assert caught.value.detail == (
        "the [[plugins]] entry gives configuration, but mymcp_plugin_v1() takes no parameter "
        "to receive it"
    )


def test_a_parity_mismatch_names_the_plugin_module_and_the_mismatch(
    workspace: Workspace,
) -> None:
    declaration = workspace.plugin(version="9.9.9")
    with pytest.raises(ExternalPluginLoadError) as caught:
        load_external_plugins([declaration])
    assert str(caught.value) == (
        f"plugin fixture-plugin (module {declaration.module}): MyMCP external plugins could "
        "not be composed with the host: contribution_version_mismatch: the contribution has "
        "version '9.9.9', the manifest '1.0.0' (code=external_plugin_composition_invalid)"
    )


def test_an_invalid_manifest_names_the_file_key_and_rule(workspace: Workspace) -> None:
    document = manifest_document("fixture-plugin")
    document["capabilities"][0]["consent"] = "always"
    declaration = workspace.plugin(manifest=document)
    with pytest.raises(ExternalPluginLoadError) as caught:
        load_external_plugins([declaration])
    assert str(caught.value) == (
        f"{declaration.manifest_path}: capabilities[0].consent: MyMCP external plugin "
        'manifest is invalid: manifest_invalid_field: expected "none" or "per_call", got '
        '"always" (a string) (code=external_manifest_invalid)'
    )

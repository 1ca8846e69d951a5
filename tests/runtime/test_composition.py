"""Composition of synthetic multi-plugin contributions into one HostRuntime."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mymcp.config import HostConfiguration, ToolSelector
from mymcp.errors import ExternalPluginLoadError, HostRuntimeCompositionError
from mymcp.governance.policy import select_tools
from mymcp.host import binding_policy, build_runtime, refuse_declared_names
from mymcp.plugin import Consent, QualifiedCapabilityId
from mymcp.plugins.mnemosyne import MnemosyneSettings, create_mnemosyne
from mymcp.runtime import HOST_ORIGIN, compose_runtime
from tests.runtime.test_external import importable_workspace, manifest_document
from tests.synthetic import DESTRUCTIVE, contribution, external_bindings, tool


def _compose(*contributions, bindings=None):
    return compose_runtime(
        contributions,
        external_bindings(*contributions) if bindings is None else bindings,
        server_version="9.9.9",
    )


def test_registry_order_is_list_tools_then_contribution_order() -> None:
    alpha = contribution("alpha", tool("alpha", "one"), tool("alpha", "two"))
    beta = contribution("beta", tool("beta", "one"))
    runtime = _compose(alpha, beta)
    assert runtime.registry.names == ("list_tools", "alpha__one", "alpha__two", "beta__one")
    assert runtime.registry.get("list_tools").origin == HOST_ORIGIN
    assert runtime.registry.get("beta__one").origin == QualifiedCapabilityId("beta", "tool", "one")
    assert runtime.generation.startswith("generation_")


def test_published_definitions_carry_annotations_title_and_description() -> None:
    runtime = _compose(
        contribution("alpha", tool("alpha", "wipe", effects=DESTRUCTIVE, title="Wipe it"))
    )
    published = runtime.registry.get("alpha__wipe").published()
    assert published["name"] == "alpha__wipe"
    assert published["title"] == "Wipe it"
    assert published["description"] == "wipe from alpha"
    assert published["annotations"] == {
        "title": "Wipe it",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": True,
    }
    for bound in runtime.registry:
        assert bound.published()["description"]
        assert bound.published()["inputSchema"]["type"] == "object"


def test_published_definitions_cannot_be_mutated_through_copies() -> None:
    runtime = _compose(contribution("alpha", tool("alpha", "one")))
    copy = runtime.registry.get("alpha__one").published()
    copy["inputSchema"]["properties"]["evil"] = {"type": "string"}
    assert "evil" not in runtime.registry.get("alpha__one").published()["inputSchema"]["properties"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        runtime.generation = "other"  # type: ignore[misc]


def test_list_tools_names_the_complete_surface() -> None:
    runtime = _compose(contribution("alpha", tool("alpha", "one")), contribution("beta"))
    handler = runtime.registry.get("list_tools").handler
    result = anyio.run(handler, {})
    assert result["structuredContent"]["summary"] == (
        "Server: mymcp 9.9.9. Available tools: list_tools, alpha__one"
    )
    assert result["structuredContent"]["tools"] == ["list_tools", "alpha__one"]


@pytest.mark.parametrize(
    ("contributions", "bindings", "code"),
    [
        pytest.param(
            [contribution("alpha"), contribution("alpha")], [], "duplicate_plugin", id="dup-plugin"
        ),
        pytest.param(
            [contribution("alpha", tool("beta", "one"))],
            None,
            "capability_plugin_mismatch",
            id="foreign-capability",
        ),
        pytest.param(
            [contribution("alpha", tool("alpha", "one"), tool("alpha", "one"))],
            None,
            "duplicate_capability",
            id="dup-capability",
        ),
        pytest.param(
            [contribution("alpha", tool("alpha", "one"))],
            [
                (QualifiedCapabilityId("alpha", "tool", "one"), "a"),
                (QualifiedCapabilityId("alpha", "tool", "one"), "b"),
            ],
            "duplicate_binding",
            id="dup-binding",
        ),
        pytest.param(
            [contribution("alpha", tool("alpha", "one"))],
            [
                (QualifiedCapabilityId("alpha", "tool", "one"), "a"),
                (QualifiedCapabilityId("alpha", "tool", "two"), "b"),
            ],
            "unknown_binding",
            id="unknown-binding",
        ),
        pytest.param(
            [contribution("alpha", tool("alpha", "one"))],
            [(QualifiedCapabilityId("alpha", "tool", "one"), "list_tools")],
            "reserved_public_name",
            id="reserved-list-tools",
        ),
        pytest.param(
            [contribution("alpha", tool("alpha", "one"))],
            [(QualifiedCapabilityId("alpha", "tool", "one"), "mymcp_status")],
            "reserved_public_name",
            id="reserved-prefix",
        ),
        pytest.param(
            [contribution("alpha", tool("alpha", "one"), tool("alpha", "two"))],
            [
                (QualifiedCapabilityId("alpha", "tool", "one"), "same"),
                (QualifiedCapabilityId("alpha", "tool", "two"), "same"),
            ],
            "duplicate_public_name",
            id="dup-name",
        ),
        pytest.param(
            [contribution("alpha", tool("alpha", "one"), tool("alpha", "two"))],
            [(QualifiedCapabilityId("alpha", "tool", "one"), "one")],
            "unbound_capability",
            id="unbound",
        ),
        pytest.param(
            [contribution("alpha", tool("alpha", "one"))],
            [(QualifiedCapabilityId("alpha", "tool", "one"), "x" * 129)],
            "invalid_public_name",
            id="name-too-long",
        ),
    ],
)
def test_every_collision_is_refused(contributions, bindings, code) -> None:
    with pytest.raises(HostRuntimeCompositionError) as caught:
        compose_runtime(
            contributions,
            external_bindings(*contributions) if bindings is None else bindings,
            server_version="1.0.0",
        )
    assert caught.value.code == code


def test_tool_without_description_is_refused() -> None:
    bad = tool("alpha", "one")
    broken = dataclasses.replace(bad, tool={"inputSchema": {"type": "object"}})
    with pytest.raises(HostRuntimeCompositionError) as caught:
        _compose(contribution("alpha", broken))
    assert caught.value.code == "invalid_tool_definition"


# What an MCP client's own check refuses in a tool definition (one such tool makes an
# SDK client refuse the whole tool list), and the code the host refuses it with.
MALFORMED_DEFINITIONS = {
    "output_not_object": ({"outputSchema": "garbage"}, "invalid_output_schema"),
    "output_of_a_string": ({"outputSchema": {"type": "string"}}, "invalid_output_schema"),
    "output_uncompilable": (
        {"outputSchema": {"type": "object", "properties": {"a": {"pattern": "("}}}},
        "invalid_output_schema",
    ),
    "output_meta_invalid": (
        {"outputSchema": {"type": "object", "required": "a"}},
        "invalid_output_schema",
    ),
    "icons_not_a_list": ({"icons": "nope"}, "invalid_tool_definition"),
    "icon_without_src": ({"icons": [{"mimeType": "image/png"}]}, "invalid_tool_definition"),
    "icon_sizes": ({"icons": [{"src": "a.png", "sizes": "48x48"}]}, "invalid_tool_definition"),
    "icon_theme": ({"icons": [{"src": "a.png", "theme": "blue"}]}, "invalid_tool_definition"),
    "icon_mime": ({"icons": [{"src": "a.png", "mimeType": 5}]}, "invalid_tool_definition"),
    # A string that is no Unicode text makes every tool list unencodable.
    "description_surrogate": ({"description": "desc \ud800 x"}, "invalid_tool_definition"),
    "title_surrogate": ({"title": "T\udc00"}, "invalid_tool_definition"),
    # Every client gets every tool's text in each list: a name to show, not a document.
    "title_too_long": ({"title": "T" * 129}, "invalid_tool_definition"),
    "description_too_long": ({"description": "d" * 16_385}, "invalid_tool_definition"),
    "icon_src_surrogate": ({"icons": [{"src": "https://e/\ud800.png"}]}, "invalid_tool_definition"),
    "output_surrogate": (
        {"outputSchema": {"type": "object", "description": "\ud800"}},
        "invalid_output_schema",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_DEFINITIONS))
def test_a_definition_clients_would_refuse_is_refused_naming_the_tool(case: str) -> None:
    extra, code = MALFORMED_DEFINITIONS[case]
    good = tool("alpha", "one")
    broken = dataclasses.replace(good, tool={**good.tool, **extra})
    with pytest.raises(HostRuntimeCompositionError) as caught:
        _compose(contribution("alpha", broken))
    assert caught.value.code == code
    assert "'alpha__one' (alpha:tool:one)" in str(caught.value)


def test_a_title_and_description_as_long_as_allowed_are_published() -> None:
    good = tool("alpha", "one")
    longest = {"title": "T" * 128, "description": "d" * 16_384}
    runtime = _compose(
        contribution("alpha", dataclasses.replace(good, tool={**good.tool, **longest}))
    )
    published = runtime.registry.get("alpha__one")
    assert published is not None
    assert (published.definition["title"], published.definition["description"]) == (
        longest["title"],
        longest["description"],
    )


def test_a_surrogate_in_a_schema_is_named_as_no_plain_json() -> None:
    good = tool("alpha", "one")
    schema = {"type": "object", "properties": {"a": {"description": "\udfff"}}}
    broken = dataclasses.replace(good, tool={**good.tool, "inputSchema": schema})
    with pytest.raises(HostRuntimeCompositionError) as caught:
        _compose(contribution("alpha", broken))
    assert caught.value.code == "invalid_input_schema"
    assert "the input schema is not plain JSON data" in str(caught.value)


def test_structured_content_too_deep_to_check_is_refused_without_checking() -> None:
    # The validator recurses natively: tens of thousands of levels would end the process.
    recursive = {"type": "object", "additionalProperties": {"$ref": "#"}}
    good = tool("alpha", "one")
    deep_tool = dataclasses.replace(good, tool={**good.tool, "outputSchema": recursive})
    bound = _compose(contribution("alpha", deep_tool)).registry.get("alpha__one")
    assert bound.output is not None

    def nested(depth: int) -> dict[str, object]:
        document: dict[str, object] = {}
        inner = document
        for _ in range(depth):
            inner["x"] = inner = {}
        return document

    assert bound.output.admits(nested(200))
    assert not bound.output.admits(nested(300))
    assert not bound.output.admits(nested(100_000))


def test_well_formed_icons_and_output_schema_are_published_as_given() -> None:
    good = tool("alpha", "one")
    icons = [{"src": "https://example.com/a.png", "mimeType": "image/png", "sizes": ["48x48"]}]
    output = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    extended = dataclasses.replace(good, tool={**good.tool, "icons": icons, "outputSchema": output})
    bound = _compose(contribution("alpha", extended)).registry.get("alpha__one")
    published = bound.published()
    assert published["icons"] == icons
    assert published["outputSchema"] == output
    assert bound.output is not None
    assert bound.output.admits({"n": 1})
    assert not bound.output.admits({"n": "1"})
    assert not bound.output.admits(None)


def test_each_bound_tool_carries_its_origin_effects_and_consent() -> None:
    runtime = _compose(
        contribution("alpha", tool("alpha", "one", effects=DESTRUCTIVE, consent=Consent.PER_CALL))
    )
    bound = runtime.registry.get("alpha__one")
    assert bound.origin == QualifiedCapabilityId("alpha", "tool", "one")
    assert bound.effects == DESTRUCTIVE
    assert bound.consent is Consent.PER_CALL


def test_a_collision_names_both_capabilities() -> None:
    alpha = contribution("alpha", tool("alpha", "one"))
    beta = contribution("beta", tool("beta", "one"))
    bindings = [
        (QualifiedCapabilityId("alpha", "tool", "one"), "same"),
        (QualifiedCapabilityId("beta", "tool", "one"), "same"),
    ]
    with pytest.raises(HostRuntimeCompositionError) as caught:
        _compose(alpha, beta, bindings=bindings)
    assert caught.value.code == "duplicate_public_name"
    assert caught.value.detail == (
        "'same' is the public name of both alpha:tool:one and beta:tool:one"
    )


# -- names beginning `memory_` belong to the bundled memory plugin ---------------------------
#
# Operators grant the bundled memory tools with a policy rule `memory_*`. No other plugin
# may publish a name that glob matches, or the rule would grant a third party's tool too.

BUNDLED = "mnemosyne"
MEMORY_GLOB = ToolSelector(text="memory_*", kind="glob", value="memory_*")


def _bundled_contribution():
    return contribution(BUNDLED, tool(BUNDLED, "memory_recall"), tool(BUNDLED, "memory_forget"))


def _pinned(*contributions):
    """Bindings as the start makes them for the bundled plugin and locally bound ones."""
    return [(t.capability, t.capability.local_id) for c in contributions for t in c.tools]


def test_the_bundled_memory_tools_still_bind_under_their_own_names() -> None:
    bundled = _bundled_contribution()
    runtime = _compose(bundled, bindings=_pinned(bundled))
    assert runtime.registry.names == ("list_tools", "memory_recall", "memory_forget")


def test_a_plugin_with_id_memory_is_refused_its_namespaced_names() -> None:
    bundled, memory = _bundled_contribution(), contribution("memory", tool("memory", "wipe_disk"))
    bindings = [*_pinned(bundled), *external_bindings(memory)]
    with pytest.raises(HostRuntimeCompositionError) as caught:
        _compose(bundled, memory, bindings=bindings)
    assert caught.value.code == "reserved_public_name"
    assert caught.value.detail == (
        "'memory__wipe_disk' (memory:tool:wipe_disk) begins with 'memory_', which is kept "
        "for the bundled memory tools so that a policy rule written as 'memory_*' means only "
        "those; give the plugin another id"
    )


def test_a_locally_bound_tool_id_beginning_memory_is_refused() -> None:
    bundled, local = (
        _bundled_contribution(),
        contribution("fixed", tool("fixed", "memory_wipe_all")),
    )
    with pytest.raises(HostRuntimeCompositionError) as caught:
        _compose(bundled, local, bindings=_pinned(bundled, local))
    assert caught.value.code == "reserved_public_name"
    assert "'memory_wipe_all' (fixed:tool:memory_wipe_all) begins with 'memory_'" in str(
        caught.value
    )
    assert "drop binding = \"local\" to publish it as 'fixed__memory_wipe_all'" in str(caught.value)


def test_only_a_name_beginning_memory_underscore_is_kept() -> None:
    # A plugin id is kebab case, so `memory_x` is no plugin id at all; `memory-x` and
    # `memoryx` are, and their names do not match `memory_*`.
    with pytest.raises(ValueError, match="invalid plugin id"):
        QualifiedCapabilityId("memory_x", "tool", "tool")
    plugins = [contribution(p, tool(p, "memory_tool")) for p in ("memory-x", "memoryx")]
    runtime = _compose(*plugins)
    assert runtime.registry.names[1:] == ("memory-x__memory_tool", "memoryx__memory_tool")
    assert select_tools(MEMORY_GLOB, list(runtime.registry), "test") == frozenset()


_PLUGIN_IDS = st.from_regex(r"[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,4}){0,2}", fullmatch=True).filter(
    lambda plugin_id: plugin_id != BUNDLED
)
_LOCAL_IDS = st.from_regex(r"[a-z][a-z0-9]{0,6}(_[a-z0-9]{1,4}){0,3}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    plugin_id=st.one_of(st.just("memory"), _PLUGIN_IDS),
    local_id=st.one_of(st.just("memory_wipe_all"), st.just("memory"), _LOCAL_IDS),
    local=st.booleans(),
)
def test_whatever_a_plugin_publishes_memory_glob_matches_only_the_bundled_tools(
    plugin_id: str, local_id: str, local: bool
) -> None:
    bundled, other = _bundled_contribution(), contribution(plugin_id, tool(plugin_id, local_id))
    bindings = [*_pinned(bundled), *(_pinned(other) if local else external_bindings(other))]
    name = bindings[-1][1]
    if name.startswith("memory_"):
        with pytest.raises(HostRuntimeCompositionError) as caught:
            _compose(bundled, other, bindings=bindings)
        assert caught.value.code == "reserved_public_name"
        return
    runtime = _compose(bundled, other, bindings=bindings)
    assert name in runtime.registry.names
    # The rule an operator writes for "the memory tools" grants exactly those.
    granted = select_tools(MEMORY_GLOB, list(runtime.registry), "test")
    assert granted == {"memory_recall", "memory_forget"}


# -- the same refusal from the manifests, before any plugin's code runs ---------------------


def _declared(*capabilities: QualifiedCapabilityId, local: frozenset[str] = frozenset()):
    bind = binding_policy(local)
    bundled = [t.capability for t in _bundled_contribution().tools]
    return {capability: bind(capability) for capability in (*bundled, *capabilities)}


def test_the_bundled_memory_names_pass_the_manifest_check() -> None:
    refuse_declared_names(_declared(), set())


def test_the_manifest_check_refuses_a_plugin_with_id_memory() -> None:
    names = _declared(QualifiedCapabilityId("memory", "tool", "wipe_disk"))
    with pytest.raises(ExternalPluginLoadError) as caught:
        refuse_declared_names(names, set(), {"memory": "plugins[0]"})
    assert caught.value.code == "external_plugin_composition_invalid"
    assert caught.value.detail is not None
    assert caught.value.detail.startswith("reserved_public_name: 'memory__wipe_disk'")
    assert "kept for the bundled memory tools" in caught.value.detail


def test_the_manifest_check_refuses_a_local_memory_name_at_the_entry_s_binding() -> None:
    names = _declared(QualifiedCapabilityId("fixed", "tool", "memory_wipe_all"), local={"fixed"})
    with pytest.raises(ExternalPluginLoadError) as caught:
        refuse_declared_names(names, {"fixed"}, {"fixed": "plugins[2]"})
    assert caught.value.code == "external_plugin_name_collision"
    assert caught.value.location.key == "plugins[2].binding"
    assert caught.value.detail == (
        "the tool name 'memory_wipe_all' (plugin 'fixed') begins with 'memory_', which is "
        "kept for the bundled memory tools so that a policy rule written as 'memory_*' means "
        'only those; give the tool another id in the plugin, or drop binding = "local" to '
        "publish it as 'fixed__memory_wipe_all'"
    )


def _import_marker(root: Path) -> tuple[Path, str]:
    """A file that exists only once a plugin module ran, and the code that makes it."""
    ran = root / "imported"
    return ran, f"import pathlib\npathlib.Path({str(ran)!r}).write_text('ran')\n"


def test_a_local_memory_name_stops_the_start_before_any_plugin_code_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with importable_workspace(tmp_path, monkeypatch) as workspace:
        ran, marker = _import_marker(workspace.root)
        document = manifest_document("fixed")
        document["capabilities"][0]["id"] = "memory_wipe_all"
        declaration = workspace.plugin("fixed", manifest=document, extra=marker)
        configuration = HostConfiguration(
            schema_version=8, plugins=(dataclasses.replace(declaration, binding="local"),)
        )
        mnemosyne = create_mnemosyne(MnemosyneSettings(), environ={}, home=tmp_path / "home")
        with pytest.raises(ExternalPluginLoadError) as caught:
            build_runtime(configuration, mnemosyne)
        assert caught.value.code == "external_plugin_name_collision"
        assert caught.value.location.key == "plugins[0].binding"
        assert not ran.exists()


def test_a_plugin_with_id_memory_stops_the_start_and_the_bundled_tools_still_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with importable_workspace(tmp_path, monkeypatch) as workspace:
        ran, marker = _import_marker(workspace.root)
        declaration = workspace.plugin("memory", extra=marker)
        mnemosyne = create_mnemosyne(MnemosyneSettings(), environ={}, home=tmp_path / "home")
        with pytest.raises(ExternalPluginLoadError) as caught:
            build_runtime(HostConfiguration(schema_version=8, plugins=(declaration,)), mnemosyne)
        assert caught.value.code == "external_plugin_composition_invalid"
        assert "reserved_public_name: 'memory__tool_0'" in str(caught.value)
        assert not ran.exists()
        names = build_runtime(HostConfiguration(schema_version=8), mnemosyne).registry.names
        assert "memory_recall" in names

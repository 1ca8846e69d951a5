"""Composition of synthetic multi-plugin contributions into one HostRuntime."""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from mymcp.errors import HostRuntimeCompositionError
from mymcp.plugin import Consent, QualifiedCapabilityId
from mymcp.runtime import HOST_ORIGIN, compose_runtime
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

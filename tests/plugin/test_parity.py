"""Manifest/definition/contribution parity (validate_plugin_contract)."""

from __future__ import annotations

import pytest

from mymcp.errors import ManifestError
from mymcp.plugin import (
    Consent,
    PluginAdapter,
    QualifiedCapabilityId,
    ToolEffects,
    validate_plugin_contract,
)
from tests.plugin.helpers import activated, adapter_for, definition

MANIFEST = definition()


def _code(adapter: PluginAdapter, host_api: int = 1) -> str:
    with pytest.raises(ManifestError) as caught:
        validate_plugin_contract(adapter, MANIFEST, host_api)
    assert caught.value.message.startswith("MyMCP plugin ")
    return caught.value.code


@pytest.mark.parametrize(
    "selected",
    [(), ("first",), ("second",), ("first", "third"), ("first", "second", "third")],
)
def test_any_ordered_subset_is_valid(selected: tuple[str, ...]) -> None:
    tools = [activated(MANIFEST, local_id) for local_id in selected]
    validate_plugin_contract(adapter_for(MANIFEST, *tools), MANIFEST)


def test_equal_but_separately_parsed_definitions_pass() -> None:
    validate_plugin_contract(adapter_for(definition(), activated(MANIFEST, "first")), MANIFEST)


@pytest.mark.parametrize(
    "changes",
    [
        {"title": "Other"},
        {"description": "Other."},
        {"data_schema_version": 2},
        {"secret_references": ["token"]},
        {"authority": {"filesystem": ["data_read"], "network": False}},
        {
            "configuration": {
                "schema_version": 1,
                "schema": {
                    "type": "object",
                    "properties": {"x": {"type": "string"}},
                    "additionalProperties": False,
                },
            }
        },
    ],
)
def test_definition_manifest_mismatch(changes: dict[str, object]) -> None:
    assert _code(adapter_for(definition(**changes))) == "definition_manifest_mismatch"


def test_host_api_incompatible() -> None:
    assert _code(adapter_for(MANIFEST), host_api=2) == "host_api_incompatible"
    wider = definition(requires={"host_api": {"min": 2, "max": 3}})
    with pytest.raises(ManifestError) as caught:
        validate_plugin_contract(adapter_for(wider), wider)
    assert caught.value.code == "host_api_incompatible"
    validate_plugin_contract(adapter_for(wider), wider, host_api=3)


def test_contribution_plugin_mismatch() -> None:
    assert _code(adapter_for(MANIFEST, plugin_id="other-plugin")) == "contribution_plugin_mismatch"


def test_tool_of_another_plugin_is_a_plugin_mismatch() -> None:
    foreign = activated(
        MANIFEST, "first", capability=QualifiedCapabilityId("other-plugin", "tool", "first")
    )
    assert _code(adapter_for(MANIFEST, foreign)) == "contribution_plugin_mismatch"


def test_contribution_version_mismatch() -> None:
    assert _code(adapter_for(MANIFEST, version="1.2.4")) == "contribution_version_mismatch"


def test_undeclared_capability() -> None:
    tool = activated(
        MANIFEST,
        "first",
        capability=QualifiedCapabilityId(MANIFEST.plugin_id, "tool", "fourth"),
    )
    assert _code(adapter_for(MANIFEST, tool)) == "undeclared_capability"


def test_duplicate_selected_capability() -> None:
    tools = (activated(MANIFEST, "first"), activated(MANIFEST, "first"))
    assert _code(adapter_for(MANIFEST, *tools)) == "duplicate_selected_capability"


@pytest.mark.parametrize(
    "changes",
    [
        {"effects": ToolEffects(False, False, True, False)},
        {"effects": ToolEffects(True, False, True, True)},
        {"consent": Consent.PER_CALL},
    ],
)
def test_capability_metadata_mismatch(changes: dict[str, object]) -> None:
    tool = activated(MANIFEST, "first", **changes)
    assert _code(adapter_for(MANIFEST, tool)) == "capability_metadata_mismatch"


def test_capability_order_mismatch() -> None:
    tools = (activated(MANIFEST, "third"), activated(MANIFEST, "first"))
    assert _code(adapter_for(MANIFEST, *tools)) == "capability_order_mismatch"


def test_non_adapter_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        validate_plugin_contract(object(), MANIFEST)  # type: ignore[arg-type]


def test_a_tool_definition_too_deep_to_copy_says_so() -> None:
    # A plugin's schema nested thousands deep: the error names the definition, not a
    # RecursionError deep in the copy.
    schema: dict[str, object] = {"type": "object"}
    for _ in range(5000):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(ValueError, match="the tool definition nests too deeply"):
        activated(MANIFEST, "first", tool={"description": "x", "inputSchema": schema})

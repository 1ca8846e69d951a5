"""The published tool schemas: contract shape, portability, llama.cpp safety, domain consistency."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.plugins.mnemosyne.memory import (
    KIND_GUIDANCE,
    MEMORY_KINDS,
    NAMESPACE_KINDS,
    TOOL_NAMES,
    MemoryOperationError,
    Scope,
    is_identifier,
    is_legacy_id,
    is_memory_id,
    is_timestamp,
    normalize_language,
    tool_definition,
    tool_definitions,
)
from mymcp.plugins.mnemosyne.memory import tools as _common
from mymcp.plugins.mnemosyne.memory.tools import REMEMBER

# The published maxLength bound. llama.cpp turns maxLength N into N grammar repetitions;
# the reference dropped the 4000/4096 bounds of content and cursor for that reason. The
# largest bound we still publish is the 1000-character recall query.
MAX_LENGTH_BOUND = 1000
# Constructs llama.cpp's regex-to-grammar converter cannot handle.
FORBIDDEN_PATTERN_PIECES = ("\\d", "\\D", "\\s", "\\S", "\\w", "\\W", "\\b", "(?")

READS = ("memory_recall", "memory_list", "memory_inspect")
MUTATIONS = (
    "memory_archive",
    "memory_restore",
    "memory_remember",
    "memory_revise",
    "memory_forget",
)


def walk(node: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema object below ``node`` (property maps are traversed by name)."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            if key == "properties":
                for name, schema in value.items():
                    yield from walk(schema, f"{path}.properties.{name}")
            elif key in ("enum", "const", "required", "default"):
                continue
            else:
                yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from walk(item, f"{path}[{index}]")


def all_schema_nodes() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for name, definition in tool_definitions().items():
        for path, node in walk(definition["inputSchema"]):
            yield name, path, node


def test_registry_order() -> None:
    assert (*READS, *MUTATIONS) == TOOL_NAMES


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_tool_has_title_description_and_object_schema(name: str) -> None:
    definition = tool_definition(name)
    assert set(definition) == {"title", "description", "inputSchema"}
    assert definition["title"].strip()
    assert definition["description"].strip()
    schema = definition["inputSchema"]
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) <= set(schema["properties"])


def test_definitions_are_fresh_copies() -> None:
    first = tool_definition("memory_recall")
    first["inputSchema"]["properties"].clear()
    assert tool_definition("memory_recall")["inputSchema"]["properties"]


@pytest.mark.parametrize("name", MUTATIONS)
def test_mutation_descriptions_carry_the_consent_note(name: str) -> None:
    assert _common.CONSENT_NOTE in tool_definition(name)["description"]


@pytest.mark.parametrize("name", READS)
def test_read_descriptions_say_read_only(name: str) -> None:
    description = tool_definition(name)["description"]
    assert "Read-only" in description
    assert _common.CONSENT_NOTE not in description


# --- llama.cpp safety ----------------------------------------------------------------------


def test_patterns_are_grammar_safe() -> None:
    patterns = [(n, p, node["pattern"]) for n, p, node in all_schema_nodes() if "pattern" in node]
    assert patterns, "expected some patterns"
    for name, path, pattern in patterns:
        where = f"{name} {path}"
        assert pattern.startswith("^"), where
        assert pattern.endswith("$"), where
        for piece in FORBIDDEN_PATTERN_PIECES:
            assert piece not in pattern, where
        re.compile(pattern)


def test_string_bounds_are_small() -> None:
    lengths = [node["maxLength"] for _, _, node in all_schema_nodes() if "maxLength" in node]
    assert max(lengths) == MAX_LENGTH_BOUND == _common.MAX_PUBLISHED_LENGTH


def test_content_and_cursor_publish_no_max_length() -> None:
    remember = tool_definition("memory_remember")["inputSchema"]
    revise = tool_definition("memory_revise")["inputSchema"]
    cursor = tool_definition("memory_list")["inputSchema"]["properties"]["cursor"]
    assert "maxLength" not in remember["properties"]["content"]
    assert "maxLength" not in revise["properties"]["content"]
    assert "maxLength" not in cursor


def test_memory_list_is_flat() -> None:
    schema = tool_definition("memory_list")["inputSchema"]
    assert not {"oneOf", "anyOf", "allOf", "if", "not"} & set(schema)
    assert list(schema["properties"]) == [
        "scope",
        "namespace_id",
        "collection_id",
        "page_size",
        "cursor",
    ]
    assert schema["required"] == ["scope"]
    assert schema["properties"]["page_size"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "default": 50,
        "description": schema["properties"]["page_size"]["description"],
    }
    collection = schema["properties"]["collection_id"]["oneOf"]
    assert collection[1] == {"type": "null"}
    assert collection[0]["pattern"] == _common.IDENTIFIER_PATTERN


# --- patterns agree with the domain validators -----------------------------------------------

_ASCII = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=70)


def _full(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern[1:-1], value) is not None


@given(st.one_of(_ASCII, st.from_regex(r"[a-z0-9][a-z0-9_-]{0,66}", fullmatch=True)))
def test_identifier_pattern_matches_domain(value: str) -> None:
    assert _full(_common.IDENTIFIER_PATTERN, value) == is_identifier(value)


@given(st.one_of(_ASCII, st.from_regex(r"mem_[0-9a-fA-F]{30,34}", fullmatch=True)))
def test_memory_id_pattern_matches_domain(value: str) -> None:
    assert _full(_common.MEMORY_ID_PATTERN, value) == is_memory_id(value)


@given(st.one_of(_ASCII, st.text(alphabet="abc._-", min_size=95, max_size=105)))
def test_legacy_id_pattern_matches_domain(value: str) -> None:
    assert _full(_common.LEGACY_ID_PATTERN, value) == is_legacy_id(value)


@given(st.one_of(_ASCII, st.from_regex(r"[A-Za-z]{1,9}(-[A-Za-z0-9]{0,9}){0,4}", fullmatch=True)))
def test_language_pattern_matches_domain(value: str) -> None:
    published = _full(_common.LANGUAGE_PATTERN, value) and len(value) <= 35
    assert published == (normalize_language(value) == value.lower())


@given(st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z?", fullmatch=True))
def test_timestamp_pattern_admits_every_domain_timestamp(value: str) -> None:
    if is_timestamp(value):
        assert _full(_common.TIMESTAMP_PATTERN, value)
    if not value.endswith("Z"):
        assert not _full(_common.TIMESTAMP_PATTERN, value)


# --- references ----------------------------------------------------------------------------


def test_inspect_accepts_v2_or_v1_reference() -> None:
    reference = tool_definition("memory_inspect")["inputSchema"]["properties"]["reference"]
    v2, v1 = reference["oneOf"]
    assert v2["required"] == ["schema_version", "scope", "namespace_id", "collection_id", "id"]
    assert v2["properties"]["schema_version"]["const"] == 2
    assert v1["required"] == ["schema_version", "scope", "id"]
    assert v1["properties"]["schema_version"]["const"] == 1
    for branch in (v2, v1):
        assert branch["additionalProperties"] is False
        assert branch["properties"]["scope"]["enum"] == [scope.value for scope in Scope]


@pytest.mark.parametrize(
    "name", ["memory_revise", "memory_archive", "memory_restore", "memory_forget"]
)
def test_changes_take_a_v2_reference_and_revision(name: str) -> None:
    schema = tool_definition(name)["inputSchema"]
    assert schema["properties"]["reference"]["properties"]["schema_version"]["const"] == 2
    assert schema["properties"]["expected_revision"]["minimum"] == 1
    assert {"reference", "expected_revision"} <= set(schema["required"])


def test_revise_fields() -> None:
    schema = tool_definition("memory_revise")["inputSchema"]
    assert schema["required"] == [
        "reference",
        "expected_revision",
        "namespace_label",
        "title",
        "content",
        "tags",
    ]
    assert "collection_label" in schema["properties"]
    assert schema["properties"]["tags"]["minItems"] == 0


@pytest.mark.parametrize("name", ["memory_archive", "memory_restore", "memory_forget"])
def test_lifecycle_fields(name: str) -> None:
    schema = tool_definition(name)["inputSchema"]
    assert list(schema["properties"]) == ["reference", "expected_revision"]


def test_scope_property_lists_every_scope_with_its_description() -> None:
    for name in ("memory_recall", "memory_list", "memory_remember"):
        scope = tool_definition(name)["inputSchema"]["properties"]["scope"]
        assert scope["enum"] == [s.value for s in Scope]
        for s in Scope:
            assert f"{s.value}: {_common.SCOPE_DESCRIPTIONS[s]}" in scope["description"]


# --- memory_remember and the domain tables -------------------------------------------------


def remember_schema() -> dict[str, Any]:
    schema: dict[str, Any] = tool_definition("memory_remember")["inputSchema"]
    return schema


def test_remember_top_level_is_flat_and_complete() -> None:
    schema = remember_schema()
    assert schema["required"] == [
        "scope",
        "namespace",
        "collection",
        "kind",
        "language",
        "title",
        "content",
        "tags",
        "origin",
    ]
    assert "occurred_at" in schema["properties"]
    assert schema["properties"]["origin"]["enum"] == [
        "explicit_user_statement",
        "user_approved_proposal",
    ]
    assert schema["properties"]["namespace"]["properties"]["kind"]["enum"] == [
        "aspect",
        "person",
        "group",
        "relationship",
        "domain",
        "project",
        "topic",
        "agent",
    ]
    kind = schema["properties"]["kind"]
    assert kind["enum"] == [
        "attribute",
        "perspective",
        "summary",
        "preference",
        "practice",
        "decision",
        "constraint",
        "state",
        "event",
        "question",
        "reference",
        "persona",
        "policy",
        "checklist",
        "failure_mode",
    ]
    for guidance in KIND_GUIDANCE.values():
        assert guidance in kind["description"]


def test_remember_describes_what_each_scope_allows() -> None:
    # The per-scope narrowing a portable schema cannot express is stated in text (and
    # enforced by the server, see below).
    properties = remember_schema()["properties"]
    namespace_text = properties["namespace"]["properties"]["kind"]["description"]
    kind_text = properties["kind"]["description"]
    for scope in Scope:
        assert f"{scope.value}: {', '.join(NAMESPACE_KINDS[scope])}" in namespace_text
        listed = ", ".join(
            f"{kind} ({KIND_GUIDANCE[(scope, kind)]})" for kind in MEMORY_KINDS[scope]
        )
        assert f"{scope.value}: {listed}" in kind_text
    assert "event" in properties["occurred_at"]["description"]


def _memory(scope: str, ns_kind: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "scope": scope,
        "namespace": {"kind": ns_kind, "id": "mnemosyne", "label": None},
        "collection": None,
        "kind": kind,
        "language": "en",
        "title": None,
        "content": "Something worth keeping.",
        "tags": [],
        "origin": "explicit_user_statement",
        **extra,
    }


def test_remember_schema_and_server_together_enforce_the_contract() -> None:
    """What the schema admits, the server narrows per scope, naming the field."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(remember_schema())
    when = "2026-01-02T03:04:05Z"
    good = [
        _memory("project", "project", "decision"),
        _memory("project", "project", "event", occurred_at=when),
        _memory("self", "aspect", "attribute"),
        _memory("agent", "agent", "failure_mode"),
        _memory("relationship", "group", "summary"),
    ]
    for document in good:
        assert validator.is_valid(document), document
        REMEMBER.parse(document)
    schema_rejects = [
        _memory("project", "project", "event", occurred_at="2026-01-02 03:04:05"),
        {**_memory("self", "aspect", "attribute"), "extra": 1},
        {k: v for k, v in _memory("self", "aspect", "attribute").items() if k != "title"},
        _memory("self", "planet", "attribute"),
    ]
    for document in schema_rejects:
        assert not validator.is_valid(document), document
        with pytest.raises(MemoryOperationError):
            REMEMBER.parse(document)
    server_narrows = [
        (_memory("project", "project", "event"), "occurred_at"),
        (_memory("project", "project", "decision", occurred_at=when), "occurred_at"),
        (_memory("self", "aspect", "decision"), "kind"),
        (_memory("self", "project", "attribute"), "namespace.kind"),
        (_memory("knowledge", "topic", "reference", occurred_at=when), "occurred_at"),
    ]
    for document, field in server_narrows:
        assert validator.is_valid(document), document
        with pytest.raises(MemoryOperationError) as caught:
            REMEMBER.parse(document)
        assert caught.value.field == field


def test_every_tool_schema_is_valid_json_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for definition in tool_definitions().values():
        jsonschema.Draft202012Validator.check_schema(definition["inputSchema"])


# --- portability: what model APIs and every client accept -------------------------------------

# Model APIs (Anthropic, OpenAI, Bedrock, Vertex, Azure) reject a tool whose input schema
# has any of these at its root; nested inside a property they are fine.
ROOT_FORBIDDEN = {"oneOf", "anyOf", "allOf", "not", "if", "then", "else", "$ref", "$defs"}
# Every agent pays for tools/list in every conversation.
TOOL_BYTES_MAX = 5_000
ALL_TOOLS_BYTES_MAX = 20_000


def published_memory_tools() -> dict[str, dict[str, Any]]:
    """What tools/list publishes for the memory tools with every gate on, by name."""
    from mymcp.config import HostConfiguration
    from mymcp.host import build_runtime
    from mymcp.plugins.mnemosyne import MnemosyneSettings, create_mnemosyne

    settings = MnemosyneSettings(remember=True, archive_restore=True, revise=True, forget=True)
    runtime = build_runtime(HostConfiguration(origin="absent_defaults"), create_mnemosyne(settings))
    return {
        tool.name: tool.published() for tool in runtime.registry.tools if tool.name in TOOL_NAMES
    }


def wire_size(document: Any) -> int:
    """Bytes of ``document`` encoded as the transport encodes replies."""
    return len(json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode())


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_no_composition_keyword_at_the_root(name: str) -> None:
    schema = tool_definition(name)["inputSchema"]
    assert not ROOT_FORBIDDEN & set(schema), name
    assert schema["type"] == "object"


def test_tools_list_stays_small() -> None:
    published = published_memory_tools()
    assert set(published) == set(TOOL_NAMES)
    sizes = {name: wire_size(tool) for name, tool in published.items()}
    assert max(sizes.values()) <= TOOL_BYTES_MAX, sizes
    assert sum(sizes.values()) <= ALL_TOOLS_BYTES_MAX, sizes
    for tool in published.values():
        assert not ROOT_FORBIDDEN & set(tool["inputSchema"])


def test_descriptions_still_say_what_each_tool_needs() -> None:
    # Smaller, but complete: each description names its statuses and its read/write nature.
    expectations = {
        "memory_recall": ("no_matches", "Read-only"),
        "memory_list": ("next_cursor", "stale_cursor", "Read-only"),
        "memory_inspect": ("revision", "Read-only"),
        "memory_remember": ("already_exists", "existing_archived", "event", "approved"),
        "memory_revise": ("expected_revision", "already_current", "replacement_outcome_uncertain"),
        "memory_archive": ("already_archived", "memory_restore"),
        "memory_restore": ("already_active",),
        "memory_forget": ("not_archived", "deletion_outcome_uncertain"),
    }
    for name, words in expectations.items():
        description = tool_definition(name)["description"]
        for word in words:
            assert word in description, (name, word)

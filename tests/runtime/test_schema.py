"""Input-schema lint, compilation and violation descriptions (synthetic and real schemas)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.types import ListToolsResult, jsonrpc_message_adapter
from pydantic import ValidationError

from mymcp.errors import HostRuntimeCompositionError
from mymcp.plugins.mnemosyne.memory import tool_definitions
from mymcp.runtime import (
    PORTABILITY_ROOT_KEYWORDS,
    ArgumentsValidator,
    SchemaFinding,
    compile_input_schema,
    compose_runtime,
    lint_input_schema,
)
from mymcp.runtime._schema import MAX_DESCRIBED_VALUES, MAX_SCHEMA_DEPTH, compile_output_schema
from mymcp.transport._exchange import encode_json
from tests.synthetic import contribution, external_bindings, schema, tool

REPO = Path(__file__).resolve().parents[2]


def _validator(input_schema: dict[str, Any]) -> ArgumentsValidator:
    validator, findings = compile_input_schema(input_schema)
    assert validator is not None, findings
    return validator


def _codes(input_schema: object) -> list[tuple[str, str, str | None]]:
    return [(f.severity, f.code, f.keyword) for f in lint_input_schema(input_schema)]


# --- lint ------------------------------------------------------------------------------


@pytest.mark.parametrize("keyword", PORTABILITY_ROOT_KEYWORDS)
def test_each_refused_root_keyword_is_a_portability_warning(keyword: str) -> None:
    value: Any = {"$defs": {"x": {"type": "string"}}, "$ref": "#/$defs/x"}.get(keyword)
    if value is None:
        value = [{"required": ["a"]}] if keyword.endswith("Of") else {"required": ["a"]}
    input_schema = {"type": "object", "$defs": {"x": {"type": "object"}}, keyword: value}
    if keyword == "$ref":
        input_schema[keyword] = "#/$defs/x"
    findings = _codes(input_schema)
    assert ("warning", "schema_root_not_portable", keyword) in findings
    assert all(severity == "warning" for severity, _, _ in findings)


def test_combinators_inside_properties_are_portable() -> None:
    nested = schema(
        label={"oneOf": [{"type": "string"}, {"type": "null"}]},
        choice={"anyOf": [{"type": "integer"}, {"type": "string"}]},
        rest={"allOf": [{"type": "object"}], "not": {"required": ["x"]}},
    )
    assert _codes(nested) == []


@pytest.mark.parametrize(
    ("input_schema", "code"),
    [
        ({"type": "array"}, "schema_root_not_object"),
        ({"properties": {}}, "schema_root_not_object"),
        ([], "schema_root_not_object"),
        (None, "schema_root_not_object"),
        ({"type": "object", "properties": {"a": {"type": "strin"}}}, "schema_invalid"),
        ({"type": "object", "properties": {"a": {"pattern": "(("}}}, "schema_uncompilable"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/none"}}}, "schema_uncompilable"),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}},
            "schema_uncompilable",
        ),
        (
            {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
            "schema_dialect_unsupported",
        ),
        ({"type": "object", "properties": {"a": {"maximum": math.nan}}}, "schema_not_json"),
        ({"type": "object", "properties": {"a": {"enum": {1, 2}}}}, "schema_not_json"),
    ],
)
def test_unusable_schemas_are_errors(input_schema: object, code: str) -> None:
    validator, findings = compile_input_schema(input_schema)
    assert validator is None
    assert findings[0].severity == "error"
    assert findings[0].code == code


def test_declared_2020_12_dialect_is_accepted() -> None:
    declared = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}
    assert _codes(declared) == []


def test_example_plugin_schemas_are_clean() -> None:
    sys.path.insert(0, str(REPO / "examples" / "example_plugin"))
    try:
        import mymcp_example_plugin as example
    finally:
        sys.path.remove(str(REPO / "examples" / "example_plugin"))
    for tool_ in example.mymcp_plugin_v1().contribution.tools:
        assert lint_input_schema(tool_.tool["inputSchema"]) == ()


def test_conformance_fixture_schema_compiles_with_portability_warnings_only() -> None:
    from tests.conformance_fixture.mymcp_conformance_fixture import (
        JSON_SCHEMA_2020_12_INPUT,
        mymcp_plugin_v1,
    )

    findings = _codes(JSON_SCHEMA_2020_12_INPUT)
    assert findings == [
        ("warning", "schema_root_not_portable", keyword)
        for keyword in ("allOf", "if", "then", "else", "$defs")
    ]
    for tool_ in mymcp_plugin_v1().contribution.tools:
        assert all(f.severity == "warning" for f in lint_input_schema(tool_.tool["inputSchema"]))
    # It still validates the 2020-12 way: $ref through $defs, allOf/anyOf, if/then/else.
    validator = _validator(JSON_SCHEMA_2020_12_INPUT)
    assert validator.check({"name": "n", "contactMethod": "phone", "phone": "1"}) is None
    missing = validator.check({"contactMethod": "email", "phone": "1"})
    assert missing is not None
    assert (missing.field, missing.rule) == ("email", "required")
    nested = validator.check({"email": "e", "address": {"city": 5}})
    assert nested is not None
    assert (nested.field, nested.rule) == ("address.city", "type")


# --- composition -----------------------------------------------------------------------


def test_composition_refuses_a_schema_that_does_not_compile() -> None:
    broken = {"type": "object", "properties": {"a": {"type": "strin"}}}
    alpha = contribution("alpha", tool("alpha", "one", input_schema=broken))
    with pytest.raises(HostRuntimeCompositionError) as caught:
        compose_runtime([alpha], external_bindings(alpha), server_version="1.0.0")
    assert caught.value.code == "invalid_input_schema"


def test_composition_warns_about_unportable_schemas(caplog: pytest.LogCaptureFixture) -> None:
    unportable = {"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}
    alpha = contribution("alpha", tool("alpha", "one", input_schema=unportable))
    caplog.set_level(logging.WARNING, logger="mymcp.host.composition")
    runtime = compose_runtime([alpha], external_bindings(alpha), server_version="1.0.0")
    assert runtime.registry.get("alpha__one") is not None
    assert [r.getMessage() for r in caplog.records] == [
        "tool_schema outcome=schema_root_not_portable tool=alpha__one keyword=anyOf"
    ]


def test_every_bound_tool_carries_its_compiled_validator() -> None:
    alpha = contribution("alpha", tool("alpha", "one", input_schema=schema(n={"type": "integer"})))
    runtime = compose_runtime([alpha], external_bindings(alpha), server_version="1.0.0")
    bound = runtime.registry.get("alpha__one")
    assert bound.validator.check({"n": 1}) is None
    assert bound.validator.check({"n": "1"}) is not None
    host = runtime.registry.get("list_tools")
    violation = host.validator.check({"anything": 1})
    assert violation is not None
    assert (violation.field, violation.rule) == ("anything", "additionalProperties")


# --- violations ------------------------------------------------------------------------

SECRET = "sk-live-DO-NOT-ECHO-4242"


@pytest.mark.parametrize(
    ("property_schema", "value", "field", "rule"),
    [
        ({"type": "string", "maxLength": 5}, SECRET, "v", "maxLength"),
        ({"type": "string", "minLength": 40}, SECRET, "v", "minLength"),
        ({"type": "string", "pattern": "^[a-z]+$"}, SECRET, "v", "pattern"),
        ({"type": "integer"}, SECRET, "v", "type"),
        ({"enum": ["a", "b"]}, SECRET, "v", "enum"),
        ({"const": "x"}, SECRET, "v", "const"),
        ({"type": "array", "items": {"type": "integer"}}, [1, 2, SECRET], "v[2]", "type"),
        ({"type": "array", "maxItems": 1}, [SECRET, SECRET + "x"], "v", "maxItems"),
        ({"type": "array", "uniqueItems": True}, [SECRET, SECRET], "v", "uniqueItems"),
        ({"type": "number", "maximum": 3}, 4.5, "v", "maximum"),
        ({"type": "integer", "multipleOf": 3}, 4, "v", "multipleOf"),
        ({"not": {"type": "string"}}, SECRET, "v", "not"),
        ({"oneOf": [{"type": "string"}, {"type": "null"}]}, 5, "v", "type"),
        (
            {"type": "object", "properties": {"w": {"type": "string"}}, "required": ["w"]},
            {},
            "v.w",
            "required",
        ),
    ],
)
def test_violation_names_field_and_rule_and_never_the_value(
    property_schema: dict[str, Any], value: Any, field: str, rule: str
) -> None:
    violation = _validator(schema(v=property_schema)).check({"v": value})
    assert violation is not None
    assert (violation.field, violation.rule) == (field, rule)
    assert f"'{field}'" in violation.message
    assert f"({rule})" in violation.message
    assert SECRET not in json.dumps(violation.payload())
    assert violation.payload() == {
        "status": "invalid_request",
        "code": "invalid_arguments",
        "field": field,
        "rule": rule,
        "message": violation.message,
    }


def test_a_bound_of_one_is_worded_in_the_singular() -> None:
    violation = _validator(schema(v={"type": "string", "minLength": 1})).check({"v": ""})
    assert violation is not None
    assert violation.message == (
        "Argument 'v' is shorter than the minimum of 1 character (minLength)."
    )


def test_unexpected_argument_names_are_shown_only_when_plain() -> None:
    validator = _validator(schema())
    plain = validator.check({"tz": 5})
    assert plain is not None
    assert (plain.field, plain.rule) == ("tz", "additionalProperties")
    hidden = validator.check({SECRET + " with spaces": 5})
    assert hidden is not None
    assert (hidden.field, hidden.rule) == ("*", "additionalProperties")
    assert SECRET not in hidden.message


_MEMORY = {name: _validator(d["inputSchema"]) for name, d in tool_definitions().items()}
_REFERENCE = {
    "schema_version": 2,
    "scope": "project",
    "namespace_id": "mymcp",
    "collection_id": None,
    "id": "mem_" + "a" * 32,
}
_REMEMBER = {
    "scope": "project",
    "namespace": {"kind": "project", "id": "mymcp", "label": None},
    "collection": None,
    "kind": "decision",
    "language": "en",
    "title": "Cache",
    "content": "We keep one cache per scan.",
    "tags": ["cache"],
    "origin": "explicit_user_statement",
}


@pytest.mark.parametrize(
    ("tool_name", "arguments", "field", "rule"),
    [
        # An extra argument is named as what it is, not as a bad query or reference.
        ("memory_recall", {"query": "cache", "scope": "project", "tz": 5}, "tz", None),
        ("memory_inspect", {"reference": _REFERENCE, "tz": 5}, "tz", None),
        (
            "memory_recall",
            {"query": "q", "scope": "project", "tags": ["a", "b", ""]},
            "tags[2]",
            "minLength",
        ),
        ("memory_inspect", {"reference": {**_REFERENCE, "id": "mem_x"}}, "reference.id", "pattern"),
        (
            "memory_remember",
            {k: v for k, v in _REMEMBER.items() if k != "origin"},
            "origin",
            "required",
        ),
        ("memory_remember", {**_REMEMBER, "title": "t" * 201}, "title", "maxLength"),
        (
            "memory_remember",
            {**_REMEMBER, "namespace": {"kind": "project", "id": "mymcp", "label": 5}},
            "namespace.label",
            "type",
        ),
        # A nullable field given a string that breaks two of its rules is a bad string,
        # not a missing null: the string's rule is named.
        ("memory_remember", {**_REMEMBER, "language": ""}, "language", "minLength"),
        ("memory_remember", {**_REMEMBER, "language": "x" * 36}, "language", "maxLength"),
        (
            "memory_remember",
            {**_REMEMBER, "collection": {"id": "", "label": None}},
            "collection.id",
            "minLength",
        ),
        ("memory_list", {"scope": "project", "collection_id": ""}, "collection_id", "minLength"),
        (
            "memory_inspect",
            {"reference": {**_REFERENCE, "collection_id": ""}},
            "reference.collection_id",
            "minLength",
        ),
        ("memory_remember", {**_REMEMBER, "collection": 5}, "collection", "type"),
    ],
)
def test_memory_tool_violations_name_the_real_fault(
    tool_name: str, arguments: dict[str, Any], field: str, rule: str | None
) -> None:
    violation = _MEMORY[tool_name].check(arguments)
    assert violation is not None
    assert violation.field == field
    assert violation.rule == (rule or "additionalProperties")


def test_valid_memory_arguments_pass() -> None:
    assert _MEMORY["memory_recall"].check({"query": "cache", "scope": "project"}) is None
    assert _MEMORY["memory_inspect"].check({"reference": _REFERENCE}) is None
    assert _MEMORY["memory_remember"].check(_REMEMBER) is None


# The reference implementation (python-jsonschema, Draft 2020-12) is the oracle: a call is
# refused exactly when it is invalid, and the refusal never repeats a value.
_ORACLE_SCHEMA = schema(
    name={"type": "string", "minLength": 1, "maxLength": 8, "pattern": "^[a-z]+$"},
    count={"type": "integer", "minimum": 0, "maximum": 10},
    tags={"type": "array", "items": {"type": "string", "maxLength": 4}, "uniqueItems": True},
    mode={"enum": ["a", "b"]},
    label={"oneOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
    nested={
        "type": "object",
        "properties": {"x": {"type": "boolean"}},
        "required": ["x"],
        "additionalProperties": False,
    },
)
_ORACLE_SCHEMA["required"] = ["name"]
# Generated strings carry a marker no message or schema contains: a refusal that repeated
# any value or unexpected key would show it.
_MARK = "\u00a7"
_marked = st.text(max_size=8).map(lambda text: _MARK + text)
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-20, 20)
    | st.floats(-20, 20)
    | _marked
    | st.sampled_from(["ab", "abc", "a", "b"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(_marked | st.just("x"), inner, max_size=3)
    ),
    max_leaves=8,
)
_arguments = st.dictionaries(
    st.sampled_from(["name", "count", "tags", "mode", "label", "nested", "extra"]) | _marked,
    _json_values,
    max_size=5,
)


@settings(max_examples=400, deadline=None)
@given(arguments=_arguments)
def test_validation_agrees_with_the_reference_implementation(arguments: dict[str, Any]) -> None:
    violation = _validator(_ORACLE_SCHEMA).check(arguments)
    expected_valid = jsonschema.Draft202012Validator(_ORACLE_SCHEMA).is_valid(arguments)
    assert (violation is None) == expected_valid
    if violation is not None:
        assert _MARK not in json.dumps(violation.payload(), ensure_ascii=False)


@pytest.mark.parametrize("name", sorted(tool_definitions()))
def test_every_bundled_tool_schema_is_portable_and_compiles(name: str) -> None:
    assert lint_input_schema(tool_definitions()[name]["inputSchema"]) == ()


def test_every_memory_tool_listed_is_small() -> None:
    sizes = {
        name: len(json.dumps({"name": name, **definition}, separators=(",", ":")))
        for name, definition in tool_definitions().items()
    }
    assert max(sizes.values()) <= 5 * 1024, sizes
    assert sum(sizes.values()) <= 20 * 1024, sizes


def test_arguments_too_large_to_describe_get_a_violation_without_a_field() -> None:
    # Naming the fault lists every violation, one per bad value: a megabyte of bad items
    # would take seconds. Above the bound the call is refused all the same, unnamed.
    items = {"type": "array", "items": {"type": "string"}}
    validator = _validator(
        {"type": "object", "properties": {"tags": {"oneOf": [items, {"type": "string"}]}}}
    )
    within = validator.check({"tags": list(range(MAX_DESCRIBED_VALUES - 1))})
    assert within is not None
    assert within.field.startswith("tags")
    beyond = validator.check({"tags": list(range(MAX_DESCRIBED_VALUES + 1))})
    assert beyond is not None
    assert (beyond.field, beyond.rule) == ("$", "schema")
    assert "10,000 values" in beyond.message
    # Valid arguments of any size are still simply valid.
    assert validator.check({"tags": ["t"] * (MAX_DESCRIBED_VALUES * 5)}) is None


@pytest.mark.parametrize(
    ("input_schema", "code", "said"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "nummber"}}},
            "schema_invalid",
            "breaks the JSON Schema 2020-12 meta-schema at properties.a.type",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "(["}}},
            "schema_uncompilable",
            'at properties.a.pattern: "([" is not a "regex"',
        ),
    ],
)
def test_a_refused_schema_says_where_it_breaks(
    input_schema: dict[str, Any], code: str, said: str
) -> None:
    # The plugin's author finds the fault without bisecting the schema.
    validator, findings = compile_input_schema(input_schema)
    assert validator is None
    (finding,) = [f for f in findings if f.severity == "error"]
    assert finding.code == code
    assert said in finding.message


# --- nesting depth ---------------------------------------------------------------------


def _schema_of_depth(depth: int) -> dict[str, Any]:
    """An object schema nesting exactly `depth` levels, each object and array one: the
    root (1), its `properties` (2), then arrays of arrays down to a string (`depth`)."""
    node: dict[str, Any] = {"type": "string"}
    for _ in range(depth - 3):
        node = {"type": "array", "items": node}
    return {"type": "object", "properties": {"p": node}}


def _compiles(which: str, document: dict[str, Any]) -> str | None:
    """None when the schema compiles, else the code of its error."""
    if which == "input":
        validator, findings = compile_input_schema(document)
        errors = [f.code for f in findings if f.severity == "error"]
        assert (validator is None) == bool(errors)
        return errors[0] if errors else None
    compiled = compile_output_schema(document)
    return compiled.code if isinstance(compiled, SchemaFinding) else None


@pytest.mark.parametrize("which", ["input", "output"])
def test_a_schema_at_the_depth_bound_compiles_and_one_level_more_is_refused(which: str) -> None:
    assert _compiles(which, _schema_of_depth(MAX_SCHEMA_DEPTH)) is None
    assert _compiles(which, _schema_of_depth(MAX_SCHEMA_DEPTH + 1)) == "schema_too_deep"


@pytest.mark.parametrize("which", ["input", "output"])
def test_a_schema_far_too_deep_is_named_too_deep_not_unreadable(which: str) -> None:
    # Deeper than Python's own recursion: the check must come before anything recursive.
    assert _compiles(which, _schema_of_depth(100_000)) == "schema_too_deep"


def test_tuples_in_a_schema_count_as_the_arrays_they_are_published_as() -> None:
    inner: Any = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH):
        inner = {"anyOf": (inner,)}
    assert _compiles("input", {"type": "object", "properties": {"p": inner}}) == "schema_too_deep"


@pytest.mark.parametrize(
    ("key", "code", "which"),
    [
        ("inputSchema", "invalid_input_schema", "input"),
        ("outputSchema", "invalid_output_schema", "output"),
    ],
)
def test_composition_refuses_a_schema_too_deep_naming_the_tool_and_the_reason(
    key: str, code: str, which: str
) -> None:
    good = tool("alpha", "one")
    deep = dataclasses.replace(
        good, tool={**good.tool, key: _schema_of_depth(MAX_SCHEMA_DEPTH + 1)}
    )
    alpha = contribution("alpha", deep)
    with pytest.raises(HostRuntimeCompositionError) as caught:
        compose_runtime([alpha], external_bindings(alpha), server_version="1.0.0")
    assert caught.value.code == code
    said = str(caught.value)
    assert "'alpha__one' (alpha:tool:one)" in said
    assert f"the {which} schema nests deeper than {MAX_SCHEMA_DEPTH} levels" in said
    assert "would hide every tool" in said


# Each wrapper and how many levels it adds (a property adds its `properties` object too).
_WRAPPERS: dict[str, tuple[Any, int]] = {
    "items": (lambda s: {"type": "array", "items": s}, 1),
    "not": (lambda s: {"not": s}, 1),
    "properties": (lambda s: {"type": "object", "properties": {"k": s}}, 2),
    "anyOf": (lambda s: {"anyOf": [s, {"type": "null"}]}, 2),
    "prefixItems": (lambda s: {"type": "array", "prefixItems": [s]}, 2),
    "$defs": (lambda s: {"$defs": {"d": s}}, 2),
}


@settings(max_examples=150, deadline=None)
@given(chain=st.lists(st.sampled_from(sorted(_WRAPPERS)), min_size=20, max_size=70))
def test_any_schema_is_refused_exactly_when_it_nests_deeper_than_the_bound(
    chain: list[str],
) -> None:
    node: Any = {"type": "string"}
    depth = 1
    for name in chain:
        wrap, levels = _WRAPPERS[name]
        node, depth = wrap(node), depth + levels
    document = {"type": "object", "properties": {"p": node}}
    depth += 2
    expected = "schema_too_deep" if depth > MAX_SCHEMA_DEPTH else None
    assert _compiles("input", document) == expected
    assert _compiles("output", document) == expected


def _sdk_reads(tools: list[dict[str, Any]]) -> bool:
    """Whether the official Python SDK reads a `tools/list` reply holding these tools, as
    its client does (the whole JSON-RPC message) and as its result type does."""
    message = encode_json({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}})
    result = encode_json({"tools": tools})
    try:
        jsonrpc_message_adapter.validate_json(message, by_name=False)
        ListToolsResult.model_validate_json(result)
    except ValidationError:
        return False
    return True


def test_a_tool_list_with_schemas_at_the_bound_is_read_by_the_sdk() -> None:
    bounded = _schema_of_depth(MAX_SCHEMA_DEPTH)
    good = tool("alpha", "deep")
    deep = dataclasses.replace(
        good, tool={**good.tool, "inputSchema": bounded, "outputSchema": bounded}
    )
    alpha = contribution("alpha", deep, tool("alpha", "plain"))
    runtime = compose_runtime([alpha], external_bindings(alpha), server_version="1.0.0")
    listing = [bound.published() for bound in runtime.registry]
    assert _sdk_reads(listing)
    # The SDK does stop somewhere (a tool list then vanishes whole): find the first
    # schema depth it refuses, and check it is beyond the bound and refused at composition.
    first_unread = next(
        depth
        for depth in range(MAX_SCHEMA_DEPTH, 1000)
        if not _sdk_reads([{"name": "t", "inputSchema": _schema_of_depth(depth)}])
    )
    assert first_unread > MAX_SCHEMA_DEPTH
    assert _compiles("input", _schema_of_depth(first_unread)) == "schema_too_deep"
    assert _compiles("output", _schema_of_depth(first_unread)) == "schema_too_deep"

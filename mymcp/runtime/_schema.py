"""Published tool schemas: the lint each input schema passes, the validators both kinds
are compiled into, and the content-free description of a call whose arguments break one.

Input schemas are JSON Schema 2020-12, MCP's default dialect. Each is compiled once, at
composition, with jsonschema-rs: on our schemas it is 3 to 50 times faster than
fastjsonschema (`bench/schema_validation.py`), and it implements 2020-12, where
fastjsonschema stops at draft 7 and silently ignores `prefixItems`, `dependentRequired`
and `unevaluatedProperties`. Compilation is offline: a `$ref` that does not resolve
inside the schema is an error, never a network fetch.

An output schema is held to the same rules (an object schema that compiles) and checks
each structured result a tool returns: MCP clients check it too, and refuse a result
that breaks it, so a plugin's broken result must stop at the host.

Neither kind may nest deeper than `MAX_SCHEMA_DEPTH`. Clients stop reading JSON at some
depth (the Python SDK at 200 levels from the top of the message), and they read the
whole `tools/list` reply at once: one schema too deep would hide every tool.

A violation is described by the path of the offending field, the keyword that failed
and a fixed sentence built from both and from the schema. It never repeats the value,
and property names that are not plain identifiers are masked, because an unexpected
argument's name is client text too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import jsonschema_rs

from mymcp._strictjson import DEFAULT_MAX_DEPTH, nests_deeper_than
from mymcp.errors import key_path

__all__ = [
    "DRAFT_2020_12",
    "MAX_SCHEMA_DEPTH",
    "PORTABILITY_ROOT_KEYWORDS",
    "ArgumentViolation",
    "ArgumentsValidator",
    "OutputValidator",
    "SchemaFinding",
    "compile_input_schema",
    "compile_output_schema",
    "is_plain_json",
    "lint_input_schema",
]

DRAFT_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"
# Model APIs (Anthropic, OpenAI, Bedrock, Vertex, Azure) refuse a tool whose input schema
# has any of these at its root, which fails the whole conversation for clients that pass
# schemas through. Nested inside a property they are fine.
PORTABILITY_ROOT_KEYWORDS: Final = (
    "oneOf",
    "anyOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "$defs",
)

MAX_SCHEMA_DEPTH: Final = DEFAULT_MAX_DEPTH
"""How deep a published input or output schema may nest, each object and array one level
(the schema's own root is level 1), as for a request. A client reads the whole
`tools/list` reply at once and refuses all of it past its parser's depth (the Python
SDK's stops at 200 levels, and the reply puts each schema four levels below its top),
so one deeper schema would make every tool, the bundled ones too, disappear for it.
64 leaves room for any schema a person writes (a property nested thirty deep)."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_ROOT_FIELD = "$"
_MASKED = "*"
_BRANCHING = frozenset({"oneOf", "anyOf"})
_DISCRIMINATING = frozenset({"type", "const", "enum"})
_MAX_SHOWN_PATTERN = 120
_MAX_SHOWN_OPTIONS = 300


@dataclass(frozen=True, slots=True)
class SchemaFinding:
    """One lint result: an `error` makes a schema unusable, a `warning` unportable.

    `message` is fixed text about the schema's shape; it is safe to print and to log.
    """

    severity: Literal["error", "warning"]
    code: str
    message: str
    keyword: str | None = None


@dataclass(frozen=True, slots=True)
class ArgumentViolation:
    """The first problem of a call's arguments against the tool's input schema."""

    field: str
    rule: str
    message: str

    def payload(self) -> dict[str, str]:
        """The structured tool error a client sees."""
        return {
            "status": "invalid_request",
            "code": "invalid_arguments",
            "field": self.field,
            "rule": self.rule,
            "message": self.message,
        }


def _error(code: str, message: str) -> SchemaFinding:
    return SchemaFinding("error", code, message)


def _compile(schema: Mapping[str, Any], which: str) -> jsonschema_rs.Validator | SchemaFinding:
    declared = schema.get("$schema", DRAFT_2020_12)
    if declared not in (DRAFT_2020_12, DRAFT_2020_12 + "#"):
        return _error(
            "schema_dialect_unsupported",
            f"the {which} schema declares a $schema other than JSON Schema 2020-12",
        )
    # Before anything that recurses: a schema thousands of levels deep is too deep, not
    # "not JSON" because the encoder ran out of stack.
    if nests_deeper_than(schema, MAX_SCHEMA_DEPTH):
        return _error(
            "schema_too_deep",
            f"the {which} schema nests deeper than {MAX_SCHEMA_DEPTH} levels (each object "
            "and array is one); clients stop reading a tool list at some depth, so one "
            "schema this deep would hide every tool from them",
        )
    if not is_plain_json(schema):
        return _error("schema_not_json", f"the {which} schema is not plain JSON data")
    document = dict(schema)
    try:
        jsonschema_rs.meta.validate(document)
    except (ValueError, jsonschema_rs.ReferencingError) as exc:
        return _error(
            "schema_invalid",
            f"the {which} schema breaks the JSON Schema 2020-12 meta-schema{_where(exc)}",
        )
    try:
        return jsonschema_rs.Draft202012Validator(document, offline=True)
    except (ValueError, jsonschema_rs.ReferencingError) as exc:
        return _error(
            "schema_uncompilable",
            f"the {which} schema cannot be compiled (an invalid pattern, or a $ref that does "
            f"not resolve inside the schema){_where(exc)}: {_first_line(exc)}",
        )


def _where(exc: Exception) -> str:
    """` at properties.a.type`: where in the schema the validator found the fault (the
    plugin author's own schema, shown on the operator's terminal only)."""
    path = getattr(exc, "instance_path", None)
    if not path:
        return ""
    return " at " + key_path(path)


def _first_line(exc: Exception) -> str:
    line = str(exc).split("\n", 1)[0]
    return line if len(line) <= 200 else line[:197] + "..."


def is_plain_json(value: object) -> bool:
    """Whether a value encodes as JSON text: no NaN, no value JSON lacks, and no string
    that is no Unicode text (a lone surrogate), which no client could read."""
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _root_not_object(which: str) -> SchemaFinding:
    return _error(
        "schema_root_not_object",
        f'the {which} schema root must be an object schema with "type": "object"',
    )


def compile_input_schema(
    schema: object,
) -> tuple[ArgumentsValidator | None, tuple[SchemaFinding, ...]]:
    """The compiled validator (None when an error prevents one) and every lint finding.

    Errors: the root is not an object schema with `"type": "object"`, or the schema nests
    deeper than `MAX_SCHEMA_DEPTH`, is not plain JSON, declares another dialect, breaks
    the 2020-12 meta-schema or does not compile. Warnings: a keyword at the root that
    model APIs refuse.
    """
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None, (_root_not_object("input"),)
    compiled = _compile(schema, "input")
    findings = [compiled] if isinstance(compiled, SchemaFinding) else []
    findings += [
        SchemaFinding(
            "warning",
            "schema_root_not_portable",
            f"the input schema root uses '{keyword}', which several model APIs refuse; "
            "move it inside a property or state the rule in the description",
            keyword,
        )
        for keyword in PORTABILITY_ROOT_KEYWORDS
        if keyword in schema
    ]
    if isinstance(compiled, SchemaFinding):
        return None, tuple(findings)
    return ArgumentsValidator(compiled), tuple(findings)


def lint_input_schema(schema: object) -> tuple[SchemaFinding, ...]:
    """Every finding for one published input schema, errors first (see compile_input_schema)."""
    return compile_input_schema(schema)[1]


def compile_output_schema(schema: object) -> OutputValidator | SchemaFinding:
    """The validator of a tool's `outputSchema`, or the error that prevents one (the
    same errors as an input schema's; model APIs never see it, so nothing warns)."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return _root_not_object("output")
    compiled = _compile(schema, "output")
    return compiled if isinstance(compiled, SchemaFinding) else OutputValidator(compiled)


MAX_STRUCTURED_DEPTH: Final = 256
"""How deep a tool's structured content may nest to be checked against its schema."""


class OutputValidator:
    """One compiled output schema."""

    __slots__ = ("_validator",)

    def __init__(self, validator: jsonschema_rs.Validator) -> None:
        self._validator = validator

    def admits(self, structured: object) -> bool:
        """Whether a result's `structuredContent` satisfies the schema. Content nested
        deeper than `MAX_STRUCTURED_DEPTH` is refused unchecked: the validator recurses
        natively, and a result some ten thousand levels deep would overflow its stack
        and end the process (no reply could encode such a result anyway)."""
        if nests_deeper_than(structured, MAX_STRUCTURED_DEPTH):
            return False
        try:
            return bool(self._validator.is_valid(structured))
        except ValueError:  # text that is not Unicode
            return False


class ArgumentsValidator:
    """One compiled input schema; `check` answers a call's arguments in microseconds."""

    __slots__ = ("_validator",)

    def __init__(self, validator: jsonschema_rs.Validator) -> None:
        self._validator = validator

    def check(self, arguments: Mapping[str, Any]) -> ArgumentViolation | None:
        """None when the arguments satisfy the schema, else the most useful violation."""
        try:
            if self._validator.is_valid(arguments):
                return None
            if _holds_more_values_than(arguments, MAX_DESCRIBED_VALUES):
                return _TOO_LARGE_TO_DESCRIBE
            errors = list(self._validator.iter_errors(arguments))
        except ValueError:
            # Text that is not Unicode, or nesting beyond the validator's own bound: the
            # request decoders refuse both first, so this only keeps a bug from escaping.
            errors = []
        if not errors:
            return ArgumentViolation(
                _ROOT_FIELD, "type", "The arguments could not be checked against the schema."
            )
        return _describe(_most_relevant(errors))


MAX_DESCRIBED_VALUES: Final = 10_000
"""The most values (objects, arrays and what they hold) that invalid arguments may have
for the server to name what is wrong with them. Naming it means listing every violation,
one per bad value, and a request of one megabyte can hold half a million of them: seconds
of work, during which the server would answer nobody else. (Telling valid from invalid
stops at the first violation, so it costs nothing like that.)"""
_TOO_LARGE_TO_DESCRIBE: Final = ArgumentViolation(
    _ROOT_FIELD,
    "schema",
    f"The arguments do not match the tool's input schema. They hold over "
    f"{MAX_DESCRIBED_VALUES:,} values, too many for the server to say where.",
)


def _holds_more_values_than(document: object, limit: int) -> bool:
    """Whether decoded JSON holds more than `limit` values below its root (stops as
    soon as it does)."""
    pending: list[object] = [document]
    counted = 0
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            counted += len(node)
            children: Any = node.values()
        elif isinstance(node, list):
            counted += len(node)
            children = node
        else:
            continue
        if counted > limit:
            return True
        pending.extend(children)
    return False


def _branches(error: jsonschema_rs.ValidationError) -> list[list[jsonschema_rs.ValidationError]]:
    """The failed branches of a oneOf/anyOf that matched nothing; else empty."""
    kind = error.kind
    if kind.name not in _BRANCHING or isinstance(
        kind, jsonschema_rs.ValidationErrorKind.OneOfMultipleValid
    ):
        return []
    context: list[list[jsonschema_rs.ValidationError]] = getattr(kind, "context", [])
    return [branch for branch in context if branch]


def _only_type_misses(error: jsonschema_rs.ValidationError) -> bool:
    """Every branch refused the value's type: the union of types says it best."""
    branches = _branches(error)
    return bool(branches) and all(
        len(branch) == 1
        and branch[0].kind.name == "type"
        and branch[0].instance_path == error.instance_path
        for branch in branches
    )


def _branch_score(
    branch: Sequence[jsonschema_rs.ValidationError], at: list[str | int]
) -> tuple[int, int]:
    # A branch refused at its own root by type/const/enum is the wrong branch, not a
    # typo, however few its complaints (a string breaking two rules of a nullable field
    # is a bad string, not a missing null); among the rest, the branch that went wrong
    # in the fewest places is the one the caller meant.
    misses = sum(1 for e in branch if e.kind.name in _DISCRIMINATING and e.instance_path == at)
    return (misses, len(branch))


def _most_relevant(
    errors: Sequence[jsonschema_rs.ValidationError],
) -> jsonschema_rs.ValidationError:
    """A precise error first; a oneOf/anyOf failure is followed into its likeliest branch."""
    direct = [error for error in errors if not _branches(error)]
    chosen = direct[0] if direct else errors[0]
    while _branches(chosen) and not _only_type_misses(chosen):
        at = chosen.instance_path
        chosen = _most_relevant(min(_branches(chosen), key=lambda b: _branch_score(b, at)))
    return chosen


def _expected_types(error: jsonschema_rs.ValidationError) -> str:
    types: list[str] = []
    if _only_type_misses(error):
        for branch in _branches(error):
            types += [name for name in branch[0].kind.types if name not in types]  # type: ignore[attr-defined]
    else:
        types = list(error.kind.types)  # type: ignore[attr-defined]
    return " or ".join(types)


def _render(path: Sequence[str | int]) -> str:
    """`tags[2]`, `namespace.id`; keys that are not plain identifiers are masked."""
    text = ""
    for segment in path:
        if isinstance(segment, int):
            text += f"[{segment}]"
        else:
            name = segment if _IDENTIFIER.fullmatch(segment) else _MASKED
            text += f".{name}" if text else name
    return text or _ROOT_FIELD


def _subject(field: str) -> str:
    if field == _ROOT_FIELD:
        return "The arguments object"
    if field.endswith(_MASKED):
        return "An argument whose name is not shown"
    return f"Argument '{field}'"


def _limit(kind: Any) -> str:
    return json.dumps(getattr(kind, "limit", getattr(kind, "multiple_of", None)))


def _phrase(error: jsonschema_rs.ValidationError) -> str:
    """What went wrong, from the keyword and the schema; never from the value."""
    kind = error.kind
    rule = kind.name
    if rule == "type" or _only_type_misses(error):
        return f"has the wrong type; the schema expects {_expected_types(error)}"
    if rule == "enum":
        options = json.dumps(kind.options, ensure_ascii=False)  # type: ignore[attr-defined]
        if len(options) <= _MAX_SHOWN_OPTIONS:
            return f"is not one of the allowed values {options}"
        return "is not one of the allowed values listed in the schema"
    if rule == "pattern":
        pattern = getattr(kind, "pattern", None)
        if isinstance(pattern, str) and len(pattern) <= _MAX_SHOWN_PATTERN:
            return f"does not match the pattern {pattern}"
        return "does not match the pattern the schema requires"
    fixed = {
        "required": "is required but missing",
        "additionalProperties": "is not accepted by this tool",
        "unevaluatedProperties": "is not accepted by this tool",
        "const": "must be exactly the value the schema fixes",
        "uniqueItems": "holds duplicate items",
        "falseSchema": "is not allowed here",
        "not": "has a form the schema forbids",
        "contains": "holds no item of the kind the schema requires",
        "propertyNames": "has a member name the schema does not allow",
        "format": "is not in the format the schema names",
        "oneOf": (
            "matches more than one of the forms the schema allows"
            if isinstance(kind, jsonschema_rs.ValidationErrorKind.OneOfMultipleValid)
            else "matches none of the forms the schema allows"
        ),
        "anyOf": "matches none of the forms the schema allows",
    }
    if rule in fixed:
        return fixed[rule]
    bounded = {
        "minLength": "is shorter than the minimum of {} characters",
        "maxLength": "is longer than the maximum of {} characters",
        "minItems": "has fewer than the minimum of {} items",
        "maxItems": "has more than the maximum of {} items",
        "minProperties": "has fewer than the minimum of {} members",
        "maxProperties": "has more than the maximum of {} members",
        "minimum": "is below the minimum of {}",
        "maximum": "is above the maximum of {}",
        "exclusiveMinimum": "must be greater than {}",
        "exclusiveMaximum": "must be less than {}",
        "multipleOf": "must be a multiple of {}",
    }
    if rule in bounded:
        limit = _limit(kind)
        phrase = bounded[rule].format(limit)
        if limit == "1":  # "a minimum of 1 character", not "1 characters"
            phrase = phrase.removesuffix("s")
        return phrase
    return "breaks a rule of the schema"


def _describe(error: jsonschema_rs.ValidationError) -> ArgumentViolation:
    kind = error.kind
    rule = "type" if _only_type_misses(error) else kind.name
    path: list[str | int] = list(error.instance_path)
    if rule == "required":
        path.append(kind.property)  # type: ignore[attr-defined]
    elif rule in ("additionalProperties", "unevaluatedProperties"):
        path.append(sorted(kind.unexpected)[0])  # type: ignore[attr-defined]
    field = _render(path)
    return ArgumentViolation(field, rule, f"{_subject(field)} {_phrase(error)} ({rule}).")

"""The memory tools as callers see them.

Each tool is one `Tool` value: its title and description, and its arguments. An argument
is declared once (`Argument`): the JSON Schema property clients see and the reader that
checks and normalises the value come from the same few constants, so the published schema
and the server's validation cannot drift apart. The host validates every call against
the published schema before a handler runs; the readers still check everything, because
the domain must stay safe when called directly, and they also enforce what a portable
schema cannot say (blank-after-trimming text, tags unique ignoring case, the kinds each
scope allows, the argument combinations of ``memory_list``). Every argument error names
the field and a reason word, with a fixed sentence explaining the rule.

`run_tool` is the one path every call takes: parse, run, then exactly one content-free
terminal log event on ``mcp.<tool>`` and a JSON-ready `ToolOutcome`.

Published schemas stay portable and small: no composition keyword at the root (model
APIs reject ``oneOf``/``anyOf``/``allOf``/``not``/``if`` there), llama.cpp-safe patterns
(anchored, bracket classes only, no ``\\d``/``\\s``) and no ``maxLength`` above
`MAX_PUBLISHED_LENGTH` (grammar converters expand a bound into one rule per character).
"""

from __future__ import annotations

import copy
import logging
import os
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, Generic, NoReturn, TypeVar

from mymcp._escaping import draws_nothing
from mymcp.logs import class_name, new_failure_id

from .model import (
    CONTENT_MAX,
    LABEL_MAX,
    LANGUAGE_MAX,
    LIFECYCLE_STATES,
    MEMORY_KINDS,
    NAMESPACE_KINDS,
    PUBLIC_ORIGINS,
    REVISION_MAX,
    TAG_MAX,
    TAGS_MAX,
    TITLE_MAX,
    Collection,
    ErrorCode,
    MemoryOperationError,
    MemoryReference,
    Namespace,
    Scope,
    V1Reference,
    V2Reference,
    error_payload,
    has_surrogates,
    is_identifier,
    is_legacy_id,
    is_memory_id,
    is_timestamp,
    kind_requires_occurred_at,
    normalize_language,
    normalize_tag,
    normalize_text,
    tag_key,
)

R = TypeVar("R")

# -- vocabulary shown to callers ------------------------------------------------------------

MAX_PUBLISHED_LENGTH: Final = 1000
QUERY_MAX: Final = 1000
PAGE_SIZE_MAX: Final = 100
DEFAULT_PAGE_SIZE: Final = 50

IDENTIFIER_PATTERN: Final = "^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$"
MEMORY_ID_PATTERN: Final = "^mem_[0-9a-f]{32}$"
LEGACY_ID_PATTERN: Final = "^[A-Za-z0-9._-]{1,100}$"
# The server trims and lowercases before its strict check, so either case is shown here.
LANGUAGE_PATTERN: Final = "^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$"
TIMESTAMP_PATTERN: Final = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"

SCOPE_DESCRIPTIONS: Final[Mapping[Scope, str]] = MappingProxyType(
    {
        Scope.SELF: "lasting facts about the user",
        Scope.RELATIONSHIP: "people, groups and relationships in the user's life",
        Scope.PREFERENCE: "likes, dislikes and defaults, by domain",
        Scope.PRACTICE: "habits, routines and ways of working, by domain",
        Scope.PROJECT: "a project's decisions, constraints, state, events and questions",
        Scope.KNOWLEDGE: "facts and explanations about a topic",
        Scope.AGENT: "user-approved operating rules for one named AI agent",
    }
)

# What each kind is for; shared kind names (summary, reference) mean different things per
# scope, so the pair is the key.
KIND_GUIDANCE: Final[Mapping[tuple[Scope, str], str]] = MappingProxyType(
    {
        (Scope.SELF, "attribute"): "a lasting trait, circumstance or ability",
        (Scope.RELATIONSHIP, "perspective"): "the user's own view of them",
        (Scope.RELATIONSHIP, "summary"): "who they are to the user",
        (Scope.PREFERENCE, "preference"): "a like, dislike or default, and when",
        (Scope.PRACTICE, "practice"): "a repeatable habit or routine",
        (Scope.PROJECT, "decision"): "a settled choice and why",
        (Scope.PROJECT, "constraint"): "a rule, budget, deadline or other limit",
        (Scope.PROJECT, "state"): "where things stand now",
        (Scope.PROJECT, "event"): "what happened, and when",
        (Scope.PROJECT, "question"): "an open question",
        (Scope.PROJECT, "reference"): "a resource the project relies on",
        (Scope.PROJECT, "summary"): "an overview of the project or an area",
        (Scope.KNOWLEDGE, "reference"): "a fact or source, with its origin",
        (Scope.KNOWLEDGE, "summary"): "a distilled explanation",
        (Scope.AGENT, "persona"): "tone, voice and manner",
        (Scope.AGENT, "policy"): "a rule to follow, as an instruction",
        (Scope.AGENT, "checklist"): "steps for a recurring task",
        (Scope.AGENT, "failure_mode"): "a past mistake and how to avoid it",
    }
)

CONSENT_NOTE: Final = (
    "This tool changes stored memory. Call it only after the user has seen and approved "
    "these exact arguments; no argument counts as consent. Given an approval link "
    "instead, have the user open it, then repeat the call. Never store secrets, "
    "credentials or sensitive personal identifiers."
)


def scope_list_text() -> str:
    """``self: ...; relationship: ...`` for every scope, in published order."""
    return "; ".join(f"{scope.value}: {SCOPE_DESCRIPTIONS[scope]}" for scope in Scope)


def _ordered_union(groups: Iterator[tuple[str, ...]]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for group in groups:
        seen.update(dict.fromkeys(group))
    return tuple(seen)


# -- outcomes and the terminal log event ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A JSON-ready tool result and whether the transport must flag it as an error."""

    payload: dict[str, Any]
    is_error: bool


LogFields = dict[str, int | bool | str]

# Every key a terminal event may carry, and how its value is shown. String values must be
# one of the listed words, so selector values, ids, text and paths have no slot to leak
# into; integers and booleans are shown as such; ``memory_id`` only in canonical form.
_PRESENCE: Final = frozenset({"present", "absent"})
_REASONS: Final = frozenset(
    {
        "missing",
        "unexpected",
        "wrong_type",
        "blank",
        "too_long",
        "too_short",
        "too_many",
        "too_few",
        "duplicate",
        "not_allowed",
        "malformed",
        "out_of_range",
        "combination",
    }
)
_INTEGER_KEYS: Final = frozenset(
    {"schema_version", "revision", "tags", "results", "count", "total", "page"}
)
_FLAG_KEYS: Final = frozenset({"collection_present"})


class CollectionMode(StrEnum):
    """How a namespace listing treats collections (decided by presence and JSON type)."""

    ALL = "all"  # collection_id omitted
    COLLECTIONLESS = "collectionless"  # collection_id is JSON null
    EXACT = "exact"  # collection_id is a string


_LOG_WORDS: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        "scope": frozenset(scope.value for scope in Scope),
        "namespace": _PRESENCE,
        "cursor": _PRESENCE,
        "collection": frozenset(mode.value for mode in CollectionMode),
        "namespace_kind": frozenset(k for kinds in NAMESPACE_KINDS.values() for k in kinds),
        "memory_kind": frozenset(k for kinds in MEMORY_KINDS.values() for k in kinds),
        "origin": frozenset(PUBLIC_ORIGINS),
        "lifecycle_state": frozenset(LIFECYCLE_STATES),
        "reason": _REASONS,
        "setting": frozenset({"candidate_limit"}),
    }
)


def _render(key: str, value: int | bool | str, fields: frozenset[str]) -> str | None:
    """The logged text of one field, or None to drop it."""
    if key in _FLAG_KEYS:
        return ("true" if value else "false") if isinstance(value, bool) else None
    if key in _INTEGER_KEYS:
        return str(value) if type(value) is int else None
    if key == "memory_id":
        return value if isinstance(value, str) and is_memory_id(value) else None
    words = fields if key == "field" else _LOG_WORDS.get(key)
    if words is not None and isinstance(value, str) and value in words:
        return value
    return None


def _emit(tool: Tool[Any], outcome: str, code: ErrorCode | None, fields: LogFields) -> None:
    parts = [f"event={tool.name}", f"outcome={outcome}"]
    if code is not None:
        parts.append(f"code={code.value}")
    for key, value in fields.items():
        rendered = _render(key, value, tool.field_names)
        if rendered is not None:
            parts.append(f"{key}={rendered}")
    logging.getLogger(f"mcp.{tool.name}").info(" ".join(parts))


# Where MyMCP's own code is: a failure is placed at its innermost line there, not in a
# library it called.
_SOURCE_DIRECTORY: Final = os.path.normpath(os.path.join(__file__, *[os.pardir] * 4)) + os.sep


def _log_failure(tool: Tool[Any], failure_id: str, exc: Exception) -> None:
    """One ERROR line an operator finds by the id the caller got: the exception's type
    and the line of MyMCP's code it came out of. Never its message or a traceback, at
    any level: either may quote memory text or a path under the memory root."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename.startswith(_SOURCE_DIRECTORY)
    ]
    where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "-"
    logging.getLogger(f"mcp.{tool.name}").error(
        "tool_failure request_id=%s tool=%s error_type=%s at=%s",
        failure_id,
        tool.name,
        class_name(type(exc)),
        where,
    )


def run_tool(
    tool: Tool[R],
    arguments: object,
    operation: Callable[[R, LogFields], dict[str, Any]],
) -> ToolOutcome:
    """Parse ``arguments`` for ``tool``, run ``operation`` and log the one terminal event.

    ``operation`` gets the typed request and a dict for log fields; it returns the
    success payload or raises `MemoryOperationError`. Anything else becomes a fixed
    ``internal_error`` carrying the id of its one log line (`_log_failure`).
    """
    fields: LogFields = {}
    retrieval = tool.retrieval
    try:
        request = tool.parse(arguments)
        payload = operation(request, fields)
    except MemoryOperationError as exc:
        fields.pop("results", None)
        if exc.field is not None:
            fields["field"] = exc.field
        if exc.reason is not None and exc.code is not ErrorCode.DISALLOWED_CONTENT:
            fields["reason"] = exc.reason
        if exc.code is ErrorCode.CANDIDATE_LIMIT_EXCEEDED:
            fields["setting"] = "candidate_limit"  # what the operator raises to fix it
        _emit(tool, exc.code.status(retrieval=retrieval).value, exc.code, fields)
        return ToolOutcome(exc.payload(retrieval=retrieval), is_error=True)
    except Exception as exc:
        failure_id = new_failure_id()
        _log_failure(tool, failure_id, exc)
        _emit(tool, "internal_error", ErrorCode.INTERNAL_ERROR, fields)
        payload = {**error_payload(ErrorCode.INTERNAL_ERROR), "request_id": failure_id}
        return ToolOutcome(payload, is_error=True)
    lifecycle = payload.get("lifecycle")
    if isinstance(lifecycle, dict):
        fields.update(lifecycle_state=lifecycle["state"], revision=lifecycle["revision"])
    _emit(tool, payload["status"], None, fields)
    return ToolOutcome(payload, is_error=False)


# -- arguments: one declaration gives the schema and the reader -----------------------------


class _Rejected(Exception):
    """A reader's verdict: ``reason`` word, the member at fault and the rule it broke."""

    def __init__(
        self,
        reason: str,
        rule: str,
        member: str = "",
        code: ErrorCode | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.rule = rule
        self.member = member
        self.code = code


Reader = Callable[[object], Any]


@dataclass(frozen=True, slots=True)
class Argument:
    """One tool argument: its published schema, its reader and how its errors read.

    ``read`` returns the normalised value or raises `_Rejected`; ``code`` is the error
    code for any problem with it (a member may override it), ``rule`` the sentence that
    says what a valid value is, ``required`` whether it must be present.
    """

    name: str
    schema: Mapping[str, Any]
    read: Reader
    code: ErrorCode
    rule: str
    required: bool = False

    def fail(self, reason: str, rule: str | None = None, member: str = "") -> NoReturn:
        field = f"{self.name}.{member}" if member else self.name
        text = rule or self.rule
        message = f"{field} is required and {text}" if reason == "missing" else f"{field} {text}"
        raise MemoryOperationError(self.code, field=field, reason=reason, message=message)


@dataclass(frozen=True, slots=True)
class Tool(Generic[R]):
    """One memory tool: what clients see, and how its arguments become a request ``R``.

    ``build`` turns the read values (absent optional arguments are missing from the
    dict) into the request and applies the rules that tie arguments together.
    ``retrieval`` makes storage failures report as ``retrieval_error`` (recall only).
    ``gate`` names the operator's setting that enables a mutation tool; the read tools
    have none and are always on.
    """

    name: str
    title: str
    description: str
    arguments: tuple[Argument, ...]
    build: Callable[[dict[str, Any]], R]
    retrieval: bool = False
    gate: str | None = None
    # Every argument and member name an error may report: the log's vocabulary for them.
    field_names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names: set[str] = set()
        for arg in self.arguments:
            names.add(arg.name)
            names.update(f"{arg.name}.{member}" for member in _members(arg.schema))
        object.__setattr__(self, "field_names", frozenset(names))

    def definition(self) -> dict[str, Any]:
        """A fresh copy of the published ``{title, description, inputSchema}``."""
        return {
            "title": self.title,
            "description": self.description,
            "inputSchema": {
                "type": "object",
                "properties": {arg.name: copy.deepcopy(dict(arg.schema)) for arg in self.arguments},
                "required": [arg.name for arg in self.arguments if arg.required],
                "additionalProperties": False,
            },
        }

    def parse(self, arguments: object) -> R:
        """Check and normalise raw arguments; the first problem raises, naming its field."""
        if type(arguments) is not dict:
            raise MemoryOperationError(
                ErrorCode.INVALID_REQUEST,
                reason="wrong_type",
                message="the arguments must be a JSON object",
            )
        known = {arg.name: arg for arg in self.arguments}
        for key in arguments:
            if key not in known:
                names = ", ".join(known)
                raise MemoryOperationError(
                    ErrorCode.INVALID_REQUEST,
                    # Echo the name only when it is a plain short word, never raw input.
                    field=key if _plain_name(key) else None,
                    reason="unexpected",
                    message=f"unknown argument; this tool accepts only: {names}",
                )
        values: dict[str, Any] = {}
        for arg in self.arguments:
            if arg.name not in arguments:
                if arg.required:
                    arg.fail("missing")
                continue
            try:
                values[arg.name] = arg.read(arguments[arg.name])
            except _Rejected as problem:
                if problem.code is not None:
                    field = f"{arg.name}.{problem.member}" if problem.member else arg.name
                    raise MemoryOperationError(
                        problem.code,
                        field=field,
                        reason=problem.reason,
                        message=f"{field} {problem.rule}",
                    ) from None
                arg.fail(problem.reason, problem.rule, problem.member)
        return self.build(values)


def _members(schema: Mapping[str, Any]) -> Iterator[str]:
    for branch in (schema, *schema.get("oneOf", ())):
        yield from branch.get("properties", {})


def _plain_name(key: object) -> bool:
    return type(key) is str and 0 < len(key) <= 64 and key.isascii() and key.isidentifier()


# -- readers and their schema fragments -----------------------------------------------------


def _text_reader(maximum: int, *, nullable: bool = False) -> Reader:
    def read(value: object) -> str | None:
        if value is None and nullable:
            return None
        if type(value) is not str:
            raise _Rejected("wrong_type", _text_rule(maximum, nullable))
        if has_surrogates(value):
            raise _Rejected("malformed", _text_rule(maximum, nullable))
        text = normalize_text(value)
        if draws_nothing(text):  # empty, or only zero-width and other invisible marks
            raise _Rejected("blank", _text_rule(maximum, nullable))
        if len(text) > maximum:
            raise _Rejected("too_long", _text_rule(maximum, nullable))
        return text

    return read


def _text_rule(maximum: int, nullable: bool) -> str:
    rule = f"must be non-blank text of at most {maximum} characters"
    return rule + " or null" if nullable else rule


def _string_schema(maximum: int | None, description: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "minLength": 1}
    if maximum is not None and maximum <= MAX_PUBLISHED_LENGTH:
        schema["maxLength"] = maximum
    if description is not None:
        schema["description"] = description
    return schema


def _nullable(schema: Mapping[str, Any], description: str) -> dict[str, Any]:
    """``schema`` or JSON null, as a nested oneOf that grammar converters understand."""
    inner = {key: value for key, value in schema.items() if key != "description"}
    return {"oneOf": [inner, {"type": "null"}], "description": description}


def text_argument(
    name: str,
    maximum: int,
    description: str,
    code: ErrorCode,
    *,
    nullable: bool = False,
    required: bool = True,
) -> Argument:
    """Free text, trimmed and NFC-composed; content publishes no length (llama.cpp)."""
    published = maximum if maximum <= MAX_PUBLISHED_LENGTH else None
    schema = _string_schema(published, description)
    if nullable:
        schema = _nullable(schema, description)
    return Argument(
        name,
        schema,
        _text_reader(maximum, nullable=nullable),
        code,
        _text_rule(maximum, nullable),
        required,
    )


def _read_scope(value: object) -> Scope:
    if type(value) is not str:
        raise _Rejected("wrong_type", _SCOPE_RULE)
    try:
        return Scope(value)
    except ValueError:
        raise _Rejected("not_allowed", _SCOPE_RULE) from None


_SCOPE_RULE: Final = "must be one of: " + ", ".join(scope.value for scope in Scope)


def scope_argument(lead: str) -> Argument:
    schema = {
        "type": "string",
        "enum": [scope.value for scope in Scope],
        "description": f"{lead} Scopes: {scope_list_text()}.",
    }
    return Argument("scope", schema, _read_scope, ErrorCode.INVALID_SCOPE, _SCOPE_RULE, True)


_IDENTIFIER_RULE: Final = (
    "must be 1-64 characters of a-z, 0-9, '-' or '_', starting and ending with a letter or digit"
)


def _read_identifier(value: object) -> str:
    if type(value) is not str:
        raise _Rejected("wrong_type", _IDENTIFIER_RULE)
    if not is_identifier(value):
        raise _Rejected("malformed", _IDENTIFIER_RULE)
    return value


def identifier_schema(description: str) -> dict[str, Any]:
    """A namespace or collection id: 1-64 of a-z and 0-9, with - or _ only inside."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "pattern": IDENTIFIER_PATTERN,
        "description": description,
    }


def _tags_reader(minimum: int) -> Reader:
    rule = (
        f"must be a list of {minimum}-{TAGS_MAX} tags of 1-{TAG_MAX} characters, unique "
        "ignoring case"
    )

    def read(value: object) -> tuple[str, ...]:
        # A tuple only ever arrives from a direct call; JSON gives lists.
        if type(value) not in (list, tuple):
            raise _Rejected("wrong_type", rule)
        assert isinstance(value, list | tuple)
        if len(value) < minimum:
            raise _Rejected("too_few", rule)
        if len(value) > TAGS_MAX:
            raise _Rejected("too_many", rule)
        tags: list[str] = []
        seen: set[str] = set()
        for item in value:
            if type(item) is not str:
                raise _Rejected("wrong_type", rule)
            tag = normalize_tag(item)
            if tag is not None and draws_nothing(tag):
                raise _Rejected("blank", rule)
            if tag is None:
                collapsed = "" if has_surrogates(item) else " ".join(item.split())
                if has_surrogates(item):
                    raise _Rejected("malformed", rule)
                raise _Rejected("too_long" if collapsed else "blank", rule)
            if tag_key(tag) in seen:
                raise _Rejected("duplicate", rule)
            seen.add(tag_key(tag))
            tags.append(tag)
        return tuple(tags)

    return read


def tags_argument(minimum: int, description: str, code: ErrorCode, *, required: bool) -> Argument:
    schema = {
        "type": "array",
        "items": {"type": "string", "minLength": 1, "maxLength": TAG_MAX},
        "minItems": minimum,
        "maxItems": TAGS_MAX,
        "uniqueItems": True,
        "description": description,
    }
    reader = _tags_reader(minimum)
    rule = (
        f"must be a list of {minimum}-{TAGS_MAX} tags of 1-{TAG_MAX} characters, unique "
        "ignoring case"
    )
    return Argument("tags", schema, reader, code, rule, required)


def _whole_number(value: object) -> int | None:
    """``value`` as an int when JSON Schema calls it an integer: an int, or a float with
    no fractional part (``5.0``, ``1e2``); never a bool. Otherwise None."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


def _integer_reader(minimum: int, maximum: int | None, rule: str) -> Reader:
    def read(value: object) -> int:
        number = _whole_number(value)
        if number is None:
            raise _Rejected("wrong_type", rule)
        if number < minimum or (maximum is not None and number > maximum):
            raise _Rejected("out_of_range", rule)
        return number

    return read


def _enum_reader(allowed: tuple[str, ...], rule: str) -> Reader:
    def read(value: object) -> str:
        if type(value) is not str:
            raise _Rejected("wrong_type", rule)
        if value not in allowed:
            raise _Rejected("not_allowed", rule)
        return value

    return read


# References: exactly the object another memory tool returned.

_V2_MEMBERS: Final = ("schema_version", "scope", "namespace_id", "collection_id", "id")
_V1_MEMBERS: Final = ("schema_version", "scope", "id")
_REFERENCE_RULE: Final = (
    "must be the exact reference object another memory tool returned, passed unchanged"
)
_MEMBER_RULES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "schema_version": "must be 2 (canonical) or 1 (legacy)",
        "scope": _SCOPE_RULE,
        "namespace_id": _IDENTIFIER_RULE,
        "collection_id": _IDENTIFIER_RULE + ", or null",
        "id": "must be mem_ and 32 lowercase hex digits (canonical) or 1-100 of A-Z, a-z, "
        "0-9, '.', '_', '-' (legacy)",
    }
)


def _reference_reader(*, legacy: bool) -> Reader:
    def member(reason: str, name: str) -> NoReturn:
        raise _Rejected(reason, _MEMBER_RULES.get(name, _REFERENCE_RULE), name)

    def read(value: object) -> MemoryReference:
        if type(value) is not dict:
            raise _Rejected("wrong_type", _REFERENCE_RULE)
        if "schema_version" not in value:
            member("missing", "schema_version")
        version = _whole_number(value["schema_version"])
        if version not in ((1, 2) if legacy else (2,)):
            if version == 1 and not legacy:
                raise _Rejected(
                    "not_allowed",
                    "must be a canonical (schema_version 2) reference: legacy memories are "
                    "read-only",
                )
            member("not_allowed" if version is not None else "wrong_type", "schema_version")
        members = _V2_MEMBERS if version == 2 else _V1_MEMBERS
        for name in members:
            if name not in value:
                member("missing", name)
        for name in value:
            if name not in members:
                raise _Rejected("unexpected", f"may only hold: {', '.join(members)}")
        scope = value["scope"]
        if type(scope) is not str or scope not in _SCOPE_WORDS:
            member("wrong_type" if type(scope) is not str else "not_allowed", "scope")
        identifier = value["id"]
        if version == 1:
            if not is_legacy_id(identifier):
                member("wrong_type" if type(identifier) is not str else "malformed", "id")
            return V1Reference(Scope(scope), identifier)
        namespace_id, collection_id = value["namespace_id"], value["collection_id"]
        if not is_identifier(namespace_id):
            member("wrong_type" if type(namespace_id) is not str else "malformed", "namespace_id")
        if collection_id is not None and not is_identifier(collection_id):
            kind = "wrong_type" if type(collection_id) is not str else "malformed"
            member(kind, "collection_id")
        if not is_memory_id(identifier):
            member("wrong_type" if type(identifier) is not str else "malformed", "id")
        return V2Reference(Scope(scope), namespace_id, collection_id, identifier)

    return read


_SCOPE_WORDS: Final = frozenset(scope.value for scope in Scope)


def _reference_schema(version: int, description: str) -> dict[str, Any]:
    scope = {"type": "string", "enum": [scope.value for scope in Scope]}
    if version == 1:
        properties: dict[str, Any] = {
            "schema_version": {"type": "integer", "const": 1},
            "scope": scope,
            "id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 100,
                "pattern": LEGACY_ID_PATTERN,
            },
        }
        members = list(_V1_MEMBERS)
    else:
        identifier = {
            "type": "string",
            "minLength": 1,
            "maxLength": 64,
            "pattern": IDENTIFIER_PATTERN,
        }
        properties = {
            "schema_version": {"type": "integer", "const": 2},
            "scope": scope,
            "namespace_id": identifier,
            "collection_id": {"oneOf": [identifier, {"type": "null"}]},
            "id": {"type": "string", "pattern": MEMORY_ID_PATTERN},
        }
        members = list(_V2_MEMBERS)
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        "required": members,
        "additionalProperties": False,
    }


def v2_reference_argument(description: str) -> Argument:
    return Argument(
        "reference",
        _reference_schema(2, description),
        _reference_reader(legacy=False),
        ErrorCode.INVALID_REFERENCE,
        "must be the exact canonical (schema_version 2) reference memory_inspect shows",
        True,
    )


_REVISION_RULE: Final = "must be a positive integer: the revision memory_inspect showed"


def expected_revision_argument() -> Argument:
    return Argument(
        "expected_revision",
        {
            "type": "integer",
            "minimum": 1,
            "description": (
                "The lifecycle revision memory_inspect showed just before this call; a "
                "different current revision fails with revision_conflict."
            ),
        },
        _integer_reader(1, REVISION_MAX, _REVISION_RULE),
        ErrorCode.INVALID_EXPECTED_REVISION,
        _REVISION_RULE,
        True,
    )


def tag_fields(field: str, tags: tuple[str, ...]) -> Iterator[tuple[str, str | None]]:
    """``(field, tag)`` pairs for the content policy, one per tag."""
    for tag in tags:
        yield field, tag


# -- memory_recall --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecallRequest:
    scope: Scope
    query: str
    namespace_id: str | None
    tags: tuple[str, ...]


def _build_recall(values: dict[str, Any]) -> RecallRequest:
    return RecallRequest(
        values["scope"], values["query"], values.get("namespace_id"), values.get("tags", ())
    )


RECALL: Final = Tool(
    name="memory_recall",
    title="Recall memory",
    description=(
        "Find the user's stored memories relevant to a free-text query in exactly one "
        "scope, optionally one namespace; request tags rank memories carrying them first. "
        "Returns at most five, best first, each with an inspect-ready reference, title, "
        "content, tags and the matched terms and tags; nothing relevant gives status "
        "no_matches. Archived memories are never recalled. Read-only. Use memory_list for "
        "a complete inventory and memory_inspect for one exact memory."
    ),
    arguments=(
        text_argument(
            "query", QUERY_MAX, "What to look for, in plain words.", ErrorCode.INVALID_QUERY
        ),
        scope_argument("The one scope to search."),
        Argument(
            "namespace_id",
            identifier_schema(
                "Optional: search only this namespace (legacy memories have none and are "
                "then left out)."
            ),
            _read_identifier,
            ErrorCode.INVALID_NAMESPACE,
            _IDENTIFIER_RULE,
        ),
        tags_argument(
            1,
            "Optional: 1-10 unique tags; memories carrying one of them rank first.",
            ErrorCode.INVALID_TAGS,
            required=False,
        ),
    ),
    build=_build_recall,
    retrieval=True,
)


# -- memory_list ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListSelector:
    """Which records a listing covers; a cursor is only valid for the same selector."""

    scope: Scope
    namespace_id: str | None
    mode: CollectionMode
    collection_id: str | None


@dataclass(frozen=True, slots=True)
class ListRequest:
    """Validated listing arguments: an initial page or a continuation."""

    selector: ListSelector
    page_size: int
    cursor: str | None


_COLLECTION_SELECTOR_RULE: Final = _IDENTIFIER_RULE + ", or null for memories outside any"


def _read_collection_selector(value: object) -> tuple[CollectionMode, str | None]:
    if value is None:
        return CollectionMode.COLLECTIONLESS, None
    if type(value) is not str:
        raise _Rejected("wrong_type", _COLLECTION_SELECTOR_RULE)
    if not is_identifier(value):
        raise _Rejected("malformed", _COLLECTION_SELECTOR_RULE)
    return CollectionMode.EXACT, value


_CURSOR_RULE: Final = "must be the unchanged next_cursor of the previous page"


def _read_cursor(value: object) -> str:
    if type(value) is not str:
        raise _Rejected("wrong_type", _CURSOR_RULE)
    if not value:
        raise _Rejected("blank", _CURSOR_RULE)
    return value


def _build_list(values: dict[str, Any]) -> ListRequest:
    namespace_id = values.get("namespace_id")
    mode, collection_id = CollectionMode.ALL, None
    if "collection_id" in values:
        if namespace_id is None:
            raise MemoryOperationError(
                ErrorCode.INVALID_REQUEST,
                field="collection_id",
                reason="combination",
                message="collection_id only works together with namespace_id",
            )
        mode, collection_id = values["collection_id"]
    cursor = values.get("cursor")
    if cursor is not None and "page_size" in values:
        # A continuation keeps the page size the cursor was issued with.
        raise MemoryOperationError(
            ErrorCode.INVALID_CURSOR,
            field="page_size",
            reason="combination",
            message="page_size only works on a first page; leave it out with a cursor",
        )
    selector = ListSelector(values["scope"], namespace_id, mode, collection_id)
    return ListRequest(selector, values.get("page_size", DEFAULT_PAGE_SIZE), cursor)


_PAGE_SIZE_RULE: Final = f"must be an integer from 1 to {PAGE_SIZE_MAX}"

LIST: Final = Tool(
    name="memory_list",
    title="List memory",
    description=(
        "Inventory every valid memory in one scope, or in one namespace or collection of "
        "it, in a fixed order and in pages, without content, query or ranking. Items carry "
        "the reference, title and inspectability, plus kind and lifecycle state for "
        "canonical memories; archived memories are included. Accepted argument "
        "combinations: (1) scope [+ page_size]; (2) scope + namespace_id [+ collection_id] "
        "[+ page_size]; (3) scope + cursor; (4) scope + namespace_id + cursor "
        "[+ collection_id]. To continue, repeat the same selector with the returned "
        "next_cursor and leave out page_size. A cursor only works in the server process "
        "that issued it; after stale_cursor or invalid_cursor start a fresh listing. "
        "Read-only."
    ),
    arguments=(
        scope_argument("The one scope to list."),
        Argument(
            "namespace_id",
            identifier_schema("Optional: list only this namespace (canonical memories only)."),
            _read_identifier,
            ErrorCode.INVALID_NAMESPACE,
            _IDENTIFIER_RULE,
        ),
        Argument(
            "collection_id",
            _nullable(
                identifier_schema(""),
                (
                    "Only together with namespace_id. Leave it out for the whole namespace, "
                    "send JSON null for memories outside any collection, or a collection id "
                    'for that one collection (the string "null" is an ordinary id).'
                ),
            ),
            _read_collection_selector,
            ErrorCode.INVALID_COLLECTION,
            _COLLECTION_SELECTOR_RULE,
        ),
        Argument(
            "page_size",
            {
                "type": "integer",
                "minimum": 1,
                "maximum": PAGE_SIZE_MAX,
                "default": DEFAULT_PAGE_SIZE,
                "description": "Items per page, 1-100 (default 50); first page only.",
            },
            _integer_reader(1, PAGE_SIZE_MAX, _PAGE_SIZE_RULE),
            ErrorCode.INVALID_PAGE_SIZE,
            _PAGE_SIZE_RULE,
        ),
        Argument(
            "cursor",
            {
                "type": "string",
                "minLength": 1,
                "description": (
                    "The opaque next_cursor of the previous page, sent unchanged with the "
                    "same selector and without page_size."
                ),
            },
            _read_cursor,
            ErrorCode.INVALID_CURSOR,
            _CURSOR_RULE,
        ),
    ),
    build=_build_list,
)


# -- memory_inspect -------------------------------------------------------------------------


def _build_inspect(values: dict[str, Any]) -> MemoryReference:
    reference: MemoryReference = values["reference"]
    return reference


INSPECT: Final = Tool(
    name="memory_inspect",
    title="Inspect memory",
    description=(
        "Return one exact memory in full, selected by the versioned reference another "
        "memory tool returned, passed unchanged. Canonical memories come with namespace, "
        "collection, kind, language, title, content, tags, provenance, lifecycle state and "
        "revision, and timestamps; archived memories are shown too. Legacy memories show "
        "only id, title, content and tags. Inspect right before proposing any change so "
        "the user can review the current record and revision. Read-only."
    ),
    arguments=(
        Argument(
            "reference",
            {
                "description": "The reference of the memory to show.",
                "oneOf": [
                    _reference_schema(2, "A canonical (version-2) memory reference."),
                    _reference_schema(1, "A legacy (version-1) memory reference."),
                ],
            },
            _reference_reader(legacy=True),
            ErrorCode.INVALID_REFERENCE,
            _REFERENCE_RULE,
            True,
        ),
    ),
    build=_build_inspect,
)


# -- memory_remember ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RememberRequest:
    scope: Scope
    namespace: Namespace
    collection: Collection | None
    kind: str
    language: str
    title: str | None
    content: str
    tags: tuple[str, ...]
    origin: str
    occurred_at: str | None


def all_namespace_kinds() -> tuple[str, ...]:
    """Every namespace kind, in first-appearance order over the scopes."""
    return _ordered_union(NAMESPACE_KINDS[scope] for scope in Scope)


def all_memory_kinds() -> tuple[str, ...]:
    """Every memory kind, in first-appearance order over the scopes."""
    return _ordered_union(MEMORY_KINDS[scope] for scope in Scope)


_LABEL_RULE: Final = _text_rule(LABEL_MAX, nullable=True)
_read_label = _text_reader(LABEL_MAX, nullable=True)


def _object_reader(
    members: tuple[str, ...], readers: Mapping[str, tuple[Reader, str]], rule: str
) -> Callable[[object], dict[str, Any]]:
    def read(value: object) -> dict[str, Any]:
        if type(value) is not dict:
            raise _Rejected("wrong_type", rule)
        for name in members:
            if name not in value:
                raise _Rejected("missing", readers[name][1], name)
        for name in value:
            if name not in members:
                raise _Rejected("unexpected", f"may only hold: {', '.join(members)}")
        result: dict[str, Any] = {}
        for name in members:
            reader, member_rule = readers[name]
            try:
                result[name] = reader(value[name])
            except _Rejected as problem:
                raise _Rejected(problem.reason, member_rule, name) from None
        return result

    return read


_NAMESPACE_KIND_RULE: Final = "must be a namespace kind the scope allows (see its description)"
_NAMESPACE_RULE: Final = "must be an object {kind, id, label}"
_read_namespace = _object_reader(
    ("kind", "id", "label"),
    {
        "kind": (_enum_reader(all_namespace_kinds(), _NAMESPACE_KIND_RULE), _NAMESPACE_KIND_RULE),
        "id": (_read_identifier, _IDENTIFIER_RULE),
        "label": (_read_label, _LABEL_RULE),
    },
    _NAMESPACE_RULE,
)
_COLLECTION_RULE: Final = "must be an object {id, label} or null"
_read_collection_object = _object_reader(
    ("id", "label"),
    {"id": (_read_identifier, _IDENTIFIER_RULE), "label": (_read_label, _LABEL_RULE)},
    _COLLECTION_RULE,
)


def _read_collection(value: object) -> Collection | None:
    if value is None:
        return None
    fields = _read_collection_object(value)
    return Collection(fields["id"], fields["label"])


_LANGUAGE_RULE: Final = (
    f"must be a language tag such as en or pt-br (at most {LANGUAGE_MAX} characters), or null"
)


def _read_language(value: object) -> str:
    if value is not None and type(value) is not str:
        raise _Rejected("wrong_type", _LANGUAGE_RULE)
    language = normalize_language(value)
    if language is None:
        raise _Rejected("malformed", _LANGUAGE_RULE)
    return language


_TIMESTAMP_RULE: Final = "must be a UTC time YYYY-MM-DDTHH:MM:SSZ"


def _read_timestamp(value: object) -> str:
    if type(value) is not str:
        raise _Rejected("wrong_type", _TIMESTAMP_RULE)
    if not is_timestamp(value):
        raise _Rejected("malformed", _TIMESTAMP_RULE)
    return value


_ORIGIN_RULE: Final = "must be " + " or ".join(PUBLIC_ORIGINS)
_KIND_RULE: Final = "must be a memory kind the scope allows (see its description)"


def _build_remember(values: dict[str, Any]) -> RememberRequest:
    scope: Scope = values["scope"]
    namespace = values["namespace"]
    if namespace["kind"] not in NAMESPACE_KINDS[scope]:
        allowed = ", ".join(NAMESPACE_KINDS[scope])
        raise MemoryOperationError(
            ErrorCode.INVALID_NAMESPACE,
            field="namespace.kind",
            reason="not_allowed",
            message=f"namespace.kind must be one the scope allows: {scope.value} takes {allowed}",
        )
    kind = values["kind"]
    if kind not in MEMORY_KINDS[scope]:
        allowed = ", ".join(MEMORY_KINDS[scope])
        raise MemoryOperationError(
            ErrorCode.INVALID_KIND,
            field="kind",
            reason="not_allowed",
            message=f"kind must be one the scope allows: {scope.value} takes {allowed}",
        )
    occurred_at = values.get("occurred_at")
    if kind_requires_occurred_at(kind) and occurred_at is None:
        raise MemoryOperationError(
            ErrorCode.INVALID_RECORD,
            field="occurred_at",
            reason="missing",
            message="occurred_at is required for kind event: a UTC time YYYY-MM-DDTHH:MM:SSZ",
        )
    if not kind_requires_occurred_at(kind) and occurred_at is not None:
        raise MemoryOperationError(
            ErrorCode.INVALID_RECORD,
            field="occurred_at",
            reason="unexpected",
            message="occurred_at belongs to kind event only; leave it out for other kinds",
        )
    return RememberRequest(
        scope=scope,
        namespace=Namespace(namespace["kind"], namespace["id"], namespace["label"]),
        collection=values["collection"],
        kind=kind,
        language=values["language"],
        title=values["title"],
        content=values["content"],
        tags=values["tags"],
        origin=values["origin"],
        occurred_at=occurred_at,
    )


def _kind_description() -> str:
    guidance = ". ".join(
        f"{scope.value}: "
        + ", ".join(f"{kind} ({KIND_GUIDANCE[(scope, kind)]})" for kind in MEMORY_KINDS[scope])
        for scope in Scope
    )
    return f"Memory kind, from the scope's own list. {guidance}."


def _namespace_kinds_text() -> str:
    return "; ".join(f"{scope.value}: {', '.join(NAMESPACE_KINDS[scope])}" for scope in Scope)


_LABEL_SCHEMA: Final = _string_schema(LABEL_MAX)

REMEMBER: Final = Tool(
    name="memory_remember",
    title="Remember memory",
    description=(
        "Store one new user-approved memory as a canonical record; returns its reference "
        "and lifecycle (status remembered, or already_exists / existing_archived when an "
        "identical memory exists, writing nothing). All nine fields are required, null "
        "where allowed; each scope takes only its own namespace and memory kinds; "
        "occurred_at only, and always, for kind event. "
        f"{CONSENT_NOTE}"
    ),
    arguments=(
        scope_argument("The scope of the new memory."),
        Argument(
            "namespace",
            {
                "type": "object",
                "description": (
                    "The container in the scope, such as one project, person or topic."
                ),
                "properties": {
                    "kind": {
                        "type": "string",
                        "enum": list(all_namespace_kinds()),
                        "description": f"Allowed per scope: {_namespace_kinds_text()}.",
                    },
                    "id": identifier_schema("Stable id; it names a directory."),
                    "label": _nullable(_LABEL_SCHEMA, "Human-readable name, or null."),
                },
                "required": ["kind", "id", "label"],
                "additionalProperties": False,
            },
            _read_namespace,
            ErrorCode.INVALID_NAMESPACE,
            _NAMESPACE_RULE,
            True,
        ),
        Argument(
            "collection",
            _nullable(
                {
                    "type": "object",
                    "properties": {
                        "id": identifier_schema("Stable id; it names a directory."),
                        "label": _nullable(_LABEL_SCHEMA, "Human-readable name, or null."),
                    },
                    "required": ["id", "label"],
                    "additionalProperties": False,
                },
                "An optional grouping inside the namespace ({id, label}), or null for none.",
            ),
            _read_collection,
            ErrorCode.INVALID_COLLECTION,
            _COLLECTION_RULE,
            True,
        ),
        Argument(
            "kind",
            {
                "type": "string",
                "enum": list(all_memory_kinds()),
                "description": _kind_description(),
            },
            _enum_reader(all_memory_kinds(), _KIND_RULE),
            ErrorCode.INVALID_KIND,
            _KIND_RULE,
            True,
        ),
        Argument(
            "language",
            _nullable(
                {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": LANGUAGE_MAX,
                    "pattern": LANGUAGE_PATTERN,
                },
                "Language tag such as en or pt-br, or null if unknown.",
            ),
            _read_language,
            ErrorCode.INVALID_RECORD,
            _LANGUAGE_RULE,
            True,
        ),
        text_argument(
            "title",
            TITLE_MAX,
            "A short title, or null.",
            ErrorCode.INVALID_RECORD,
            nullable=True,
        ),
        text_argument(
            "content",
            CONTENT_MAX,
            "The memory, written to stand on its own (at most 4000 characters).",
            ErrorCode.INVALID_RECORD,
        ),
        tags_argument(
            0,
            "0-10 unique tags of 1-50 characters.",
            ErrorCode.INVALID_RECORD,
            required=True,
        ),
        Argument(
            "origin",
            {
                "type": "string",
                "enum": list(PUBLIC_ORIGINS),
                "description": (
                    "explicit_user_statement: the user said it; user_approved_proposal: the user "
                    "approved a memory you proposed. Provenance, not consent."
                ),
            },
            _enum_reader(PUBLIC_ORIGINS, _ORIGIN_RULE),
            ErrorCode.INVALID_ORIGIN,
            _ORIGIN_RULE,
            True,
        ),
        Argument(
            "occurred_at",
            {
                "type": "string",
                "pattern": TIMESTAMP_PATTERN,
                "description": "Kind event only, and required there: when it happened, UTC.",
            },
            _read_timestamp,
            ErrorCode.INVALID_RECORD,
            _TIMESTAMP_RULE,
        ),
    ),
    build=_build_remember,
    gate="remember",
)


# -- memory_revise, memory_archive, memory_restore, memory_forget ---------------------------


@dataclass(frozen=True, slots=True)
class ReviseRequest:
    reference: V2Reference
    expected_revision: int
    namespace_label: str | None
    collection_label: str | None
    title: str | None
    content: str
    tags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ChangeRequest:
    """The exact canonical memory a lifecycle change names, at the revision expected."""

    reference: V2Reference
    expected_revision: int


def _build_revise(values: dict[str, Any]) -> ReviseRequest:
    reference: V2Reference = values["reference"]
    label = values.get("collection_label")
    if reference.collection_id is None and label is not None:
        raise MemoryOperationError(
            ErrorCode.INVALID_COLLECTION,
            field="collection_label",
            reason="combination",
            message="collection_label must be null or left out: the memory has no collection",
        )
    if reference.collection_id is not None and "collection_label" not in values:
        raise MemoryOperationError(
            ErrorCode.INVALID_COLLECTION,
            field="collection_label",
            reason="missing",
            message="collection_label is required when the memory has a collection",
        )
    return ReviseRequest(
        reference,
        values["expected_revision"],
        values["namespace_label"],
        label,
        values["title"],
        values["content"],
        values["tags"],
    )


def _build_change(values: dict[str, Any]) -> ChangeRequest:
    return ChangeRequest(values["reference"], values["expected_revision"])


_REFERENCE_HINT: Final = "The exact canonical reference of the memory, as memory_inspect shows it."

REVISE: Final = Tool(
    name="memory_revise",
    title="Revise memory",
    description=(
        "Replace the user-editable text of one canonical memory as a whole: namespace "
        "label, collection label, title, content and tags. Identity, scope, kind, "
        "language, provenance, lifecycle state and occurrence time never change, and "
        "labels never move the record. Inspect first and pass its revision as "
        "expected_revision; the result is revised (revision + 1) or already_current when "
        "nothing would change. On replacement_outcome_uncertain, inspect the same "
        f"reference before any retry. {CONSENT_NOTE}"
    ),
    arguments=(
        v2_reference_argument(_REFERENCE_HINT),
        expected_revision_argument(),
        text_argument(
            "namespace_label",
            LABEL_MAX,
            "New namespace label, or null to clear it.",
            ErrorCode.INVALID_RECORD,
            nullable=True,
        ),
        text_argument(
            "collection_label",
            LABEL_MAX,
            (
                "New collection label, or null to clear it. Required when "
                "reference.collection_id is not null; may be left out otherwise."
            ),
            ErrorCode.INVALID_COLLECTION,
            nullable=True,
            required=False,
        ),
        text_argument(
            "title",
            TITLE_MAX,
            "New title, or null for none.",
            ErrorCode.INVALID_RECORD,
            nullable=True,
        ),
        text_argument(
            "content",
            CONTENT_MAX,
            "New complete content (at most 4000 characters).",
            ErrorCode.INVALID_RECORD,
        ),
        tags_argument(
            0,
            "New complete tag list: 0-10 unique tags.",
            ErrorCode.INVALID_RECORD,
            required=True,
        ),
    ),
    build=_build_revise,
    gate="revise",
)


def _change_tool(name: str, title: str, description: str, gate: str) -> Tool[ChangeRequest]:
    return Tool(
        name=name,
        title=title,
        description=f"{description} {CONSENT_NOTE}",
        arguments=(v2_reference_argument(_REFERENCE_HINT), expected_revision_argument()),
        build=_build_change,
        gate=gate,
    )


ARCHIVE: Final = _change_tool(
    "memory_archive",
    "Archive memory",
    "Archive one active canonical memory: it stays stored and inspectable but is no longer "
    "recalled. Inspect first and pass its revision as expected_revision; the result is "
    "archived (revision + 1) or already_archived. memory_restore reverses it. On "
    "replacement_outcome_uncertain, inspect the same reference before any retry.",
    "archive_restore",
)
RESTORE: Final = _change_tool(
    "memory_restore",
    "Restore memory",
    "Make one archived canonical memory active again so recall finds it. Inspect first and "
    "pass its revision as expected_revision; the result is restored (revision + 1) or "
    "already_active. On replacement_outcome_uncertain, inspect the same reference before "
    "any retry.",
    "archive_restore",
)
FORGET: Final = _change_tool(
    "memory_forget",
    "Forget memory",
    "Permanently delete one archived canonical memory file; it cannot be restored and no "
    "copy is kept. Only archived memories can be forgotten (an active one gives "
    "not_archived): archive it first, then inspect and pass its current revision as "
    "expected_revision. A second call gives not_found. On deletion_outcome_uncertain, "
    "inspect the same reference before any retry.",
    "forget",
)


# -- the registry ---------------------------------------------------------------------------

TOOLS: Final[Mapping[str, Tool[Any]]] = MappingProxyType(
    {
        tool.name: tool
        for tool in (RECALL, LIST, INSPECT, ARCHIVE, RESTORE, REMEMBER, REVISE, FORGET)
    }
)
"""Every memory tool by its public name, in registry order (reads, then mutations)."""

TOOL_NAMES: Final[tuple[str, ...]] = tuple(TOOLS)
TOOL_GATES: Final[Mapping[str, str | None]] = MappingProxyType(
    {name: tool.gate for name, tool in TOOLS.items()}
)
"""Each tool's gate (None: always on), in registry order: what the plugin adapter needs
to register the tools, so a new tool is one `Tool` here, a service method and its
manifest entry."""


def tool_definition(name: str) -> dict[str, Any]:
    """A fresh copy of one tool's published definition; KeyError for an unknown name."""
    return TOOLS[name].definition()


def tool_definitions() -> dict[str, dict[str, Any]]:
    """Fresh copies of every definition, in registry order."""
    return {name: tool.definition() for name, tool in TOOLS.items()}

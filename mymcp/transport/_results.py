"""What a tool result must be to reach a client: the shape MCP defines for it.

Clients parse every result against the protocol's types (the official SDKs with strict
models) and refuse the whole reply when one member is off: a content block of an
unknown kind or missing its text, an annotation of the wrong type, structured content
that breaks the tool's declared output schema. A plugin's result is checked here
before it is sent, so that such a result becomes the host's fixed internal error, with
a log line for the operator, instead of a reply the client cannot read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from mymcp._strictjson import DEFAULT_MAX_DEPTH
from mymcp.runtime import BoundTool
from mymcp.transport._exchange import encode_json

__all__ = ["MAX_RESULT_BYTES", "MAX_RESULT_VALUES", "checked_result"]

# What one plugin result may hold. Results are read, checked and encoded on the event
# loop, so a far larger one would hold every other request up; no client can give a
# model more than this at once anyway.
MAX_RESULT_BYTES: Final = 16 * 1024 * 1024
MAX_RESULT_VALUES: Final = 1_000_000


def checked_result(tool: BoundTool, outcome: object) -> dict[str, Any] | str:
    """The result to send for a handler's answer, or why it is no tool result clients
    accept from this tool, as a fixed code for the operator's log (never the content).

    An external plugin's answer is copied into plain dicts and lists first, and only the
    copy is checked and sent: the plugin's own objects may change under a thread of its
    own, or misbehave when read (a mapping whose reading raises), after the checks.
    Such an answer is refused as `result_unreadable`. The copy must also encode as JSON
    text: one holding NaN, a value JSON has no type for, an object key that is no
    string, nesting deeper than a request may (64 levels), or a string that is no
    Unicode (a file name decoded with `surrogateescape`) is refused here rather than
    when the reply is encoded, so that the call's audit outcome says it failed. So is a
    result beyond `MAX_RESULT_VALUES` values or `MAX_RESULT_BYTES` of JSON
    (`result_too_large`): reading, checking and sending it would hold every other
    request up for seconds. The bundled memory tools build their results from records
    already read as strict JSON, and are spared the copy and these checks.
    """
    if not isinstance(outcome, Mapping):
        return _shape_problem(outcome) or "not_an_object"
    if tool.bundled:
        result = dict(outcome)
    else:
        try:
            copied = _plain_copy(outcome)
        except BaseException:
            # The plugin's object failed while it was read, whatever it raised (even
            # SystemExit): the copy runs no await, so no cancellation of this request can
            # arrive here, and the call must still end with its outcome recorded.
            return "result_unreadable"
        if isinstance(copied, str):
            return copied
        result = copied
    problem = _shape_problem(result)
    if problem is not None:
        return problem
    if not _keeps_output_schema(tool, result):
        return "structured_content_breaks_output_schema"
    if not tool.bundled:
        size = _encoded_size(result)
        if size is None:
            return "not_json"  # NaN or an infinity, bytes or another non-JSON value, bad text
        if size > MAX_RESULT_BYTES:
            return "result_too_large"
    return result


def _encoded_size(result: dict[str, Any]) -> int | None:
    try:
        return len(encode_json(result))
    except (TypeError, ValueError, RecursionError):
        return None


def _plain_copy(outcome: Mapping[str, Any]) -> dict[str, Any] | str:
    """The answer rebuilt from plain dicts and lists (other values kept as they are, for
    the encoder to judge), or why not: an object in it keyed by something other than
    text, or nesting deeper than a request may (`key_not_text_or_too_deep`), or more
    values or text than a result may hold (`result_too_large`, found before any of it is
    encoded).

    The encoder writes a number, boolean or None key as text, so `{1: …, "1": …}` would
    reach the client as one object naming a member twice; and clients stop reading at
    some depth (the Python SDK's parser near 200 levels), so a deeper result would be a
    reply nobody can read."""
    root: dict[str, Any] = {}
    copy = _Copy((outcome, root, 1))
    while copy.pending:
        source, target, depth = copy.pending.pop()
        if depth > DEFAULT_MAX_DEPTH:
            return "key_not_text_or_too_deep"
        copy.values += len(source)
        if copy.values > MAX_RESULT_VALUES:
            return "result_too_large"
        if isinstance(target, dict):
            for key, value in source.items():
                if type(key) is not str:
                    return "key_not_text_or_too_deep"
                copy.text += len(key)
                target[key] = copy.of(value, depth)
        else:
            target.extend([copy.of(value, depth) for value in source])
        if copy.text > MAX_RESULT_BYTES:  # its JSON would be longer still
            return "result_too_large"
    return root


_SCALARS: Final = frozenset({int, float, bool, type(None)})
_Pending = tuple[Any, dict[str, Any] | list[Any], int]
"""A container still to copy: the plugin's, its copy (empty so far), and its level."""


class _Copy:
    """One answer being copied: the containers still to fill, and how many values and
    characters of text it holds so far."""

    __slots__ = ("pending", "text", "values")

    def __init__(self, first: _Pending) -> None:
        self.pending = [first]
        self.values = 0
        self.text = 0

    def of(self, value: object, depth: int) -> object:
        """An empty container standing for `value` in the copy (filled once it is taken
        from `pending`), or `value` itself when it is no container."""
        # Most values are text, numbers and plain dicts and lists, told by their type at
        # once; only other values pay for the abstract class's (much dearer) check.
        kind = type(value)
        if kind is str:
            self.text += len(cast(str, value))
            return value
        if kind in _SCALARS:
            return value
        if kind is dict or (kind is not list and isinstance(value, Mapping)):
            mapping: dict[str, Any] = {}
            self.pending.append((value, mapping, depth + 1))
            return mapping
        if kind is list or isinstance(value, list | tuple):
            sequence: list[Any] = []
            self.pending.append((value, sequence, depth + 1))
            return sequence
        return value


def _shape_problem(outcome: object) -> str | None:
    """Which part of a handler's answer is off the shape of a tool result, or None when
    it has that shape: a list of content blocks MCP defines, `isError` a boolean if
    present, `structuredContent` and `_meta` objects if present (or null). Anything else
    would reach clients as a result their SDK refuses to read."""
    if not isinstance(outcome, Mapping):
        if hasattr(outcome, "__await__"):
            return "awaitable_not_awaited"  # a handler that should be `async def`
        return "not_an_object"
    content = outcome.get("content")
    if not isinstance(content, list):
        return "content_not_a_list"
    if not all(_is_content_block(block) for block in content):
        return "content_block_malformed"
    if not isinstance(outcome.get("isError", False), bool):
        return "is_error_not_a_boolean"
    structured = outcome.get("structuredContent")
    if not (structured is None or isinstance(structured, Mapping)):
        return "structured_content_not_an_object"
    if not isinstance(outcome.get("_meta", {}), Mapping):
        return "meta_not_an_object"
    return None


# A value's check, by member name.
_Members = Mapping[str, Callable[[object], bool]]


def _members_keep(value: Mapping[str, Any], required: _Members, optional: _Members) -> bool:
    """Whether every required member is there and valid, and every optional one that is
    there is valid."""
    for member, valid in required.items():
        if member not in value or not valid(value[member]):
            return False
    return all(valid(value[member]) for member, valid in optional.items() if member in value)


def _is_text(value: object) -> bool:
    return isinstance(value, str)


def _is_object(value: object) -> bool:
    return isinstance(value, Mapping)


def _is_icons(value: object) -> bool:
    """Icons of a resource link: each a `src`, with an optional MIME type, a list of
    sizes and a `light` or `dark` theme."""
    return isinstance(value, list) and all(
        isinstance(icon, Mapping)
        and _members_keep(
            icon,
            {"src": _is_text},
            {"mimeType": _is_text, "sizes": _is_text_list, "theme": _is_theme},
        )
        for icon in value
    )


def _is_text_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_theme(value: object) -> bool:
    return value in ("light", "dark")


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_priority(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1


def _is_audience(value: object) -> bool:
    return isinstance(value, list) and all(role in ("user", "assistant") for role in value)


def _is_annotations(value: object) -> bool:
    return isinstance(value, Mapping) and _members_keep(
        value, {}, {"audience": _is_audience, "priority": _is_priority, "lastModified": _is_text}
    )


def _is_embedded(value: object) -> bool:
    """An embedded resource: its uri, and its text or its bytes (base64)."""
    return (
        isinstance(value, Mapping)
        and _members_keep(value, {"uri": _is_text}, {"mimeType": _is_text, "_meta": _is_object})
        and (_is_text(value.get("text")) or _is_text(value.get("blob")))
    )


# Every content block may carry these; each kind adds its own. Members MCP does not
# define pass unchecked, as clients let them pass.
_BLOCK_MEMBERS: Final[_Members] = {"annotations": _is_annotations, "_meta": _is_object}
# Each kind of content block: the members it must have, and the optional ones it may.
_BLOCK_KINDS: Final[Mapping[str, tuple[_Members, _Members]]] = {
    "text": ({"text": _is_text}, {}),
    "image": ({"data": _is_text, "mimeType": _is_text}, {}),
    "audio": ({"data": _is_text, "mimeType": _is_text}, {}),
    "resource_link": (
        {"uri": _is_text, "name": _is_text},
        {
            "title": _is_text,
            "description": _is_text,
            "mimeType": _is_text,
            "size": _is_size,
            "icons": _is_icons,
        },
    ),
    "resource": ({"resource": _is_embedded}, {}),
}


def _is_content_block(block: object) -> bool:
    if not isinstance(block, Mapping):
        return False
    kind = block.get("type")
    members = _BLOCK_KINDS.get(kind) if isinstance(kind, str) else None
    if members is None:
        return False
    required, optional = members
    return _members_keep(block, required, optional) and _members_keep(block, {}, _BLOCK_MEMBERS)


def _keeps_output_schema(tool: BoundTool, outcome: Mapping[str, Any]) -> bool:
    """Whether a result satisfies the tool's declared output schema: a successful result
    of such a tool must carry structured content that the schema admits (clients check
    it, and refuse the result otherwise); an error result need not."""
    if tool.output is None or outcome.get("isError") is True:
        return True
    return tool.output.admits(outcome.get("structuredContent"))

"""The JSON of MyMCP: one strict decoding profile for documents it trusts, one for
messages, and the one compact encoder every reply and audit record is written with.

Manifests, verifier files, OAuth metadata and JWKS, token claims, memory records, list
cursors and stringified tool arguments go through `load_strict_json`: strict UTF-8, no
duplicate object keys, no NaN or infinities (neither literals nor overflowing numbers),
bounded size and bounded nesting. On request, it also refuses an escaped unpaired
surrogate (`"\\ud800"`): valid JSON syntax, but no Unicode text, since no UTF-8 can hold
it.

Every MCP request body goes through `load_message_json`: the same rules, unpaired
surrogates always refused, except duplicate keys, which keep the last value. Refusing
them would take a Python hook per object, tripling the cost of every request, and
nothing in the host re-reads the raw bytes, so no other reader can take another value.

Request bodies are on every call's path, so `load_message_json` first hands them to
msgspec's compiled decoder, which reads a typical request three times faster than the
standard library does. It refuses everything the exact decoder below refuses (and a
little more: very long negative integers), and where it accepts a document it reads the
same value (the tests compare the two on generated documents). Whenever it refuses, the
exact decoder decides: it names the reason or, for the few documents only msgspec
refuses, reads them.
"""

from __future__ import annotations

import enum
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NoReturn, cast

import msgspec

from mymcp.errors import NOWHERE, Location, MyMCPError

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "StrictJsonError",
    "StrictJsonReason",
    "compact_json_encoder",
    "holds_lone_surrogate",
    "load_message_json",
    "load_strict_json",
    "nests_deeper_than",
]

DEFAULT_MAX_DEPTH = 64
# Some editors save one; the decoder would only say it expected a value.
_BOM_COMPLAINT = (
    "the text starts with a byte-order mark (U+FEFF), which JSON does not allow here: "
    "save it as UTF-8 without one"
)


class StrictJsonReason(enum.StrEnum):
    TOO_LARGE = "too_large"
    INVALID_UTF8 = "invalid_utf8"  # also an escaped unpaired surrogate, when refused
    INVALID_JSON = "invalid_json"
    DUPLICATE_KEY = "duplicate_key"
    NON_FINITE = "non_finite"
    TOO_DEEP = "too_deep"


class StrictJsonError(MyMCPError, ValueError):
    """The input is not one strict JSON document; carries no excerpt of it, only the
    reason and, for a syntax error or a number that cannot be read (`load_strict_json`),
    the complaint and position."""

    def __init__(
        self, reason: StrictJsonReason, detail: str | None = None, location: Location = NOWHERE
    ) -> None:
        super().__init__(
            reason.value,
            "MyMCP could not decode one strict JSON document",
            location=location,
            detail=detail,
        )
        self.reason = reason


def _fail(reason: StrictJsonReason) -> NoReturn:
    raise StrictJsonError(reason)


def _reject_constant(_name: str) -> NoReturn:
    _fail(StrictJsonReason.NON_FINITE)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # e.g. 1e999 overflows to infinity
        _fail(StrictJsonReason.NON_FINITE)
    return value


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            _fail(StrictJsonReason.DUPLICATE_KEY)
        result[key] = value
    return result


_JSON_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def nests_deeper_than(document: object, limit: int) -> bool:
    """Whether JSON-like data holds containers nested more than `limit` deep (walked
    without recursion: the point is to bound depth). Any mapping counts as an object and
    a tuple as an array, as the reply encoder writes them: a plugin's data may hold both."""
    pending: list[tuple[object, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        kind = type(value)
        children: Iterable[object]
        # Decoded JSON holds only dicts, lists and these scalars: all are told by their
        # type at once, and only other values pay for the abstract class's check.
        if kind is dict:
            children = list(cast("dict[object, object]", value).values())
        elif kind is list:
            children = cast("list[object]", value)
        elif kind in _JSON_SCALARS:
            continue
        elif isinstance(value, Mapping):
            children = list(value.values())
        elif isinstance(value, list | tuple):
            children = value
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


# Built once: `json.loads` with any keyword builds a new decoder and scanner per call,
# which costs as much as decoding a small request.
_STRICT_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_object, parse_constant=_reject_constant, parse_float=_finite_float
)
_MESSAGE_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
# Compiled, and reused like the others: decoding with it is the common case.
_FAST_MESSAGE_DECODER = msgspec.json.Decoder()


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def holds_lone_surrogate(text: str, document: object) -> bool:
    """Whether `document`, whose JSON text is `text`, holds a string that is no Unicode
    text (an unpaired surrogate).

    Raw surrogates cannot be in UTF-8 or ASCII JSON text, so only an escape can make
    one; a text without any surrogate escape is answered by one C-speed search.
    """
    if _SURROGATE_ESCAPE.search(text) is None:
        return False
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# A string (skipped whole, whatever it holds), NaN or an infinity, or a number in JSON's
# grammar (integer part, fraction, exponent), as the decoder reads them.
_VALUE_TOKEN = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"|(-?Infinity|NaN)|(-?(?:0|[1-9]\d*))(\.\d+)?([eE][-+]?\d+)?',
    re.DOTALL,
)
_NON_FINITE_DETAIL = "not a finite number (NaN, an infinity, or too large for a float)"


def _is_unreadable_number(token: re.Match[str]) -> bool:
    """Whether `token` is a number the decoder refuses: NaN, an infinity, a float that
    overflows to one, or an integer beyond the digit limit."""
    literal, integer, fraction, exponent = token.groups()
    if literal is not None:
        return True
    if integer is None:  # a string
        return False
    try:
        if fraction or exponent:
            _finite_float(token.group())
        else:
            int(token.group())
    except ValueError:  # StrictJsonError is one too
        return True
    return False


def _refuse_number(text: str, reason: StrictJsonReason) -> NoReturn:
    """Refuse `text` for the first number the decoder could not read, naming its line and
    column: the decoder's hooks see the number but not where it is.

    Only called once the decoder refused a number, so everything before it is valid
    JSON and every string on the way is skipped whole; the request path never gets here.
    """
    for match in _VALUE_TOKEN.finditer(text):
        if _is_unreadable_number(match):
            # Counted exactly as the decoder counts the position of its own complaints.
            where = json.JSONDecodeError("", text, match.start())
            detail = _NON_FINITE_DETAIL if reason is StrictJsonReason.NON_FINITE else None
            raise StrictJsonError(reason, detail, Location(line=where.lineno, column=where.colno))
    _fail(reason)


def _could_exceed_depth(text: str, limit: int) -> bool:
    # A document with no more brackets than the limit cannot nest deeper than it; counting
    # is C-speed, so the walk below only runs for bodies that could be a problem.
    return text.count("[") + text.count("{") > limit


_OPEN_BRACKET: Final = ord("[")


def _could_exceed_depth_bytes(data: bytes, limit: int) -> bool:
    # The same count on the encoded bytes: no byte of a multi-byte UTF-8 sequence is ASCII.
    # Most requests hold no array, and looking for one is far cheaper than counting. (The
    # byte is looked for as a number: a bytes needle first fails as one, and the error
    # that costs is dearer than the search.)
    if _OPEN_BRACKET not in data:
        # Without arrays every level below the top is an object member, `"":{` and `}` at
        # the least, so `limit + 1` levels take at least `5 * limit + 2` bytes: a shorter
        # body (most requests) cannot nest too deeply, and is not counted.
        return len(data) >= 5 * limit + 2 and data.count(b"{") > limit
    return data.count(b"[") + data.count(b"{") > limit


def load_strict_json(
    data: bytes | str,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_bytes: int | None = None,
    unicode_text: bool = False,
) -> Any:
    """Decode one strict JSON document, or raise `StrictJsonError` saying why not.

    With `unicode_text`, a string that is not Unicode text (an unpaired surrogate, raw in
    `data` or escaped) is refused as INVALID_UTF8; without it, such strings are left to
    the caller's own field checks.
    """
    if max_bytes is not None and len(data) > max_bytes:
        _fail(StrictJsonReason.TOO_LARGE)
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            _fail(StrictJsonReason.INVALID_UTF8)
    else:
        text = data
        if unicode_text and not _is_unicode(text):
            _fail(StrictJsonReason.INVALID_UTF8)
    try:
        document = _STRICT_DECODER.decode(text)
    except StrictJsonError as exc:
        if exc.reason is StrictJsonReason.NON_FINITE:
            _refuse_number(text, exc.reason)
        raise
    except RecursionError:
        _fail(StrictJsonReason.TOO_DEEP)
    except json.JSONDecodeError as exc:
        position = Location(line=exc.lineno, column=exc.colno)
        complaint = _BOM_COMPLAINT if text.startswith("\ufeff") else exc.msg
        raise StrictJsonError(StrictJsonReason.INVALID_JSON, complaint, position) from None
    except ValueError:  # an integer beyond the digit limit
        _refuse_number(text, StrictJsonReason.INVALID_JSON)
    if _could_exceed_depth(text, max_depth) and nests_deeper_than(document, max_depth):
        _fail(StrictJsonReason.TOO_DEEP)
    if unicode_text and holds_lone_surrogate(text, document):
        _fail(StrictJsonReason.INVALID_UTF8)
    return document


def load_message_json(data: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Decode one request body: strict UTF-8, finite numbers, bounded nesting.

    Raw surrogate bytes are invalid UTF-8; an escaped unpaired surrogate (`"\\ud800"`) is
    valid JSON syntax but no Unicode text, and would reach every plugin, validator and
    log as a string nothing can encode. Both are refused as INVALID_UTF8.
    """
    try:
        document = _FAST_MESSAGE_DECODER.decode(data)
    except (msgspec.MsgspecError, RecursionError):
        return _load_message_exactly(data, max_depth)
    if _could_exceed_depth_bytes(data, max_depth) and nests_deeper_than(document, max_depth):
        _fail(StrictJsonReason.TOO_DEEP)
    return document


def _load_message_exactly(data: bytes, max_depth: int) -> Any:
    """`load_message_json` by the standard library's decoder: the reason for a refusal."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        _fail(StrictJsonReason.INVALID_UTF8)
    try:
        document = _MESSAGE_DECODER.decode(text)
    except StrictJsonError:
        raise
    except RecursionError:
        _fail(StrictJsonReason.TOO_DEEP)
    except json.JSONDecodeError:
        _fail(StrictJsonReason.INVALID_JSON)
    except ValueError:  # valid JSON, but an integer beyond the digit limit
        limit = sys.get_int_max_str_digits()
        detail = f"an integer has more than {limit} digits, more than this server reads"
        raise StrictJsonError(StrictJsonReason.INVALID_JSON, detail) from None
    if _could_exceed_depth(text, max_depth) and nests_deeper_than(document, max_depth):
        _fail(StrictJsonReason.TOO_DEEP)
    if holds_lone_surrogate(text, document):
        _fail(StrictJsonReason.INVALID_UTF8)
    return document


def _not_json(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON")


def compact_json_encoder(*, sort_keys: bool) -> Callable[[object], str]:
    """Compact, ASCII-only JSON (with `\\u` escapes, so total over every string the
    decoders accept) that refuses NaN, infinities and non-JSON values (ValueError,
    TypeError), built once.

    `json.dumps` with any keyword builds a new encoder per call, which costs more than
    encoding a small value; the C encoder object is reusable. Circular values are not
    tracked (what is encoded is a tree) and end in RecursionError like any too-deep one.
    """
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:  # a Python without the C accelerator
        return json.JSONEncoder(
            allow_nan=False, sort_keys=sort_keys, separators=(",", ":"), default=_not_json
        ).encode
    escape = json.encoder.encode_basestring_ascii
    # markers, default, string encoder, indent, key and item separators, sort_keys,
    # skipkeys, allow_nan
    chunks = make(None, _not_json, escape, None, ":", ",", sort_keys, False, False)

    def encode(value: object) -> str:
        return "".join(chunks(value, 0))

    return encode

"""Hypothesis properties of the memory domain that the example-based tests do not cover.

* normalisation is idempotent (bounded text, tags, language) and stored records are a
  fixed point of parse/serialise;
* arbitrary bytes in a record file are listed, recalled and inspected as a valid record
  or skipped with the bounded reason, never an escaped exception;
* a tampered or foreign-signed list cursor is ``invalid_cursor`` (``stale_cursor`` only
  for a foreign instance id), and any selected change between pages is ``stale_cursor``;
* revisions strictly increase across any sequence of revise/archive/restore, and every
  mutation result's ``reference`` inspects to the state the mutation reported;
* a content-policy refusal never echoes the refused value, in the payload or the logs.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mymcp.plugins.mnemosyne.memory import (
    MAX_RECORD_BYTES,
    CursorCodec,
    ErrorCode,
    Lifecycle,
    MemoryRecordV2,
    MemoryService,
    MutationService,
    Namespace,
    PolicyReason,
    Provenance,
    RecordRejected,
    Scope,
    SkipReason,
    V2Reference,
    find_disallowed,
    is_identifier,
    normalize_bounded_text,
    normalize_language,
    normalize_tag,
    normalize_tags,
    normalize_text,
    parse_record,
    reference_of,
    reference_parts,
    serialize_record,
)
from tests.log_capture import attached

from .conftest import tree_snapshot

SETTLED_AGE_NS = 3600 * 1_000_000_000
INVALID = ("invalid_request", "invalid_cursor")
STALE = ("conflict", "stale_cursor")


# --- shared helpers ------------------------------------------------------------------------


def _settle(path: Path) -> None:
    old = time.time_ns() - SETTLED_AGE_NS
    os.utime(path, ns=(old, old), follow_symlinks=False)


def _v2_body(
    namespace: str = "alpha",
    collection: str | None = None,
    *,
    memory_id: str | None = None,
    content: str = "alpha bravo charlie",
    state: str = "active",
) -> dict[str, Any]:
    return {
        "schema_version": 2,
        "id": memory_id or "mem_" + uuid.uuid4().hex,
        "scope": "project",
        "namespace": {"kind": "project", "id": namespace, "label": None},
        "collection": None if collection is None else {"id": collection, "label": None},
        "kind": "decision",
        "language": "en",
        "title": "A title",
        "content": content,
        "tags": ["delta"],
        "provenance": {"origin": "explicit_user_statement", "recorded_via": "memory_remember"},
        "lifecycle": {"state": state, "revision": 1},
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }


def _v2_relative(body: dict[str, Any]) -> str:
    parts = [body["scope"], body["namespace"]["id"]]
    if body["collection"] is not None:
        parts.append(body["collection"]["id"])
    return "/".join([*parts, body["id"] + ".json"])


def _dump(body: dict[str, Any]) -> bytes:
    return (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode()


def _put(root: Path, relative: str, data: bytes, *, settled: bool = True) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if settled:
        _settle(path)
    return path


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        # The formatted form includes exception text and tracebacks, should any appear.
        self.lines.append(logging.Formatter("%(name)s %(message)s").format(record))


@contextmanager
def _captured_logs() -> Iterator[_Capture]:
    handler = _Capture()
    with attached(handler, None, logging.DEBUG):
        yield handler


@contextmanager
def _temp_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="mymcp-prop-") as tmp:
        root = Path(tmp) / "memory"
        root.mkdir()
        yield root


def _service(root: Path) -> MemoryService:
    return MemoryService(lambda: root, 10_000, CursorCodec.generate())


# --- normalisation is idempotent -----------------------------------------------------------

# Characters where normalisation is delicate: line endings, Unicode whitespace that
# str.split/strip know about, combining marks, compatibility forms and a lone surrogate.
_AWKWARD = "\r\n\t \u00a0\u2028\u2029\x1c\x1d\x85\u3000\u0301\u0327e\u00e9\u212b\ufb01\ud800aA"
_TEXT = st.one_of(st.text(max_size=40), st.text(alphabet=_AWKWARD, max_size=20))


@settings(max_examples=200, deadline=None)
@given(value=_TEXT, maximum=st.integers(1, 30))
def test_bounded_text_normalisation_is_idempotent(value: str, maximum: int) -> None:
    once = normalize_bounded_text(value, maximum)
    if once is None:
        return
    assert once == normalize_text(value)
    assert normalize_bounded_text(once, maximum) == once
    assert normalize_text(once) == once


@settings(max_examples=200, deadline=None)
@given(values=st.lists(_TEXT, max_size=11), minimum=st.integers(0, 1))
def test_tag_normalisation_is_idempotent(values: list[str], minimum: int) -> None:
    once = normalize_tags(values, minimum=minimum)
    if once is None:
        return
    assert normalize_tags(list(once), minimum=minimum) == once
    assert all(normalize_tag(tag) == tag for tag in once)


@settings(max_examples=200, deadline=None)
@given(
    value=st.one_of(
        st.none(),
        st.text(max_size=40),
        st.from_regex(r"[ \t]*[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8}){0,3}[ \t]*", fullmatch=True),
        st.text(alphabet="\u212a\u0130\u017fkKsSiI- \t", max_size=10),
    )
)
def test_language_normalisation_is_idempotent(value: str | None) -> None:
    once = normalize_language(value)
    if once is not None:
        assert normalize_language(once) == once


_LABEL = st.one_of(st.none(), _TEXT.map(lambda t: normalize_bounded_text(t, 100)))


@st.composite
def _records(draw: st.DrawFn) -> MemoryRecordV2:
    content = normalize_bounded_text(draw(_TEXT), 4000) or "fallback content"
    title = normalize_bounded_text(draw(_TEXT), 200)
    tags = normalize_tags(draw(st.lists(_TEXT, max_size=4)), minimum=0) or ()
    language = normalize_language(draw(st.sampled_from([None, " EN-gb ", "de", "zh-Hant"])))
    assert language is not None
    return MemoryRecordV2(
        id="mem_" + uuid.uuid4().hex,
        scope=Scope.PROJECT,
        namespace=Namespace("project", "alpha", draw(_LABEL)),
        collection=None,
        kind="decision",
        language=language,
        title=title,
        content=content,
        tags=tags,
        provenance=Provenance("explicit_user_statement", "memory_remember"),
        lifecycle=Lifecycle("active", draw(st.integers(1, 10**6))),
        created_at="2026-01-01T00:00:00Z",
        updated_at="2026-01-01T00:00:00Z",
    )


@settings(max_examples=150, deadline=None)
@given(record=_records())
def test_stored_records_are_a_fixed_point_of_parse_and_serialise(record: MemoryRecordV2) -> None:
    data = serialize_record(record)
    again = parse_record(data)
    assert again == record
    assert isinstance(again, MemoryRecordV2)
    assert serialize_record(again) == data


# --- arbitrary bytes in a record file ------------------------------------------------------

_BASE_V2 = _v2_body(memory_id="mem_" + "ab" * 16)
_BASE_PATH = _v2_relative(_BASE_V2)
_BASE_REFERENCE = {
    "schema_version": 2,
    "scope": "project",
    "namespace_id": "alpha",
    "collection_id": None,
    "id": _BASE_V2["id"],
}
_BASE_V1 = {"schema_version": 1, "id": "legacy-x", "content": "alpha bravo", "tags": ["delta"]}
_BASES = [_dump(_BASE_V2), _dump(_BASE_V1)]
_OVERSIZED = _dump(_BASE_V2).rstrip(b"\n") + b" " * MAX_RECORD_BYTES + b"\n"


@st.composite
def _mangled(draw: st.DrawFn) -> bytes:
    """A record file's bytes after a few byte-level edits (or plain random bytes)."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([draw(st.binary(max_size=400)), _OVERSIZED, b""]))
    data = bytearray(draw(st.sampled_from(_BASES)))
    edits = st.tuples(st.sampled_from("fid"), st.integers(0, 10**6), st.integers(0, 255))
    for kind, where, byte in draw(st.lists(edits, max_size=4)):
        if kind == "i":
            data.insert(where % (len(data) + 1), byte)
        elif data and kind == "f":
            data[where % len(data)] = byte
        elif data:
            start = where % len(data)
            del data[start : start + 1 + byte % 8]
    return bytes(data)


def _verdict(data: bytes, relative: str) -> Any:
    """The record the file holds at ``relative``, or the skip reason the index must give."""
    try:
        record = parse_record(data)
    except RecordRejected as exc:
        return exc.reason
    parts = tuple(relative.split("/"))
    reference = reference_of(record, Scope(parts[0]))
    if isinstance(reference, V2Reference) and reference_parts(reference) != parts:
        return SkipReason.PATH_MISMATCH
    return record


@settings(max_examples=150, deadline=None)
@given(data=_mangled(), relative=st.sampled_from([_BASE_PATH, "project/notes/legacy-x.json"]))
def test_arbitrary_record_bytes_are_read_or_skipped_never_raised(
    data: bytes, relative: str
) -> None:
    verdict = _verdict(data, relative)  # parse_record itself must not raise anything else
    with _temp_root() as root:
        _put(root, relative, data)
        service = _service(root)
        with _captured_logs() as logs:
            listed = service.list({"scope": "project"})
        recalled = service.recall({"query": "alpha bravo delta", "scope": "project"})
        inspected = service.inspect({"reference": _BASE_REFERENCE})

    assert not listed.is_error, listed.payload
    assert recalled.payload["status"] in ("ok", "no_matches"), recalled.payload
    assert inspected.payload["status"] in ("ok", "not_found"), inspected.payload
    items = listed.payload["memories"]
    skips = [r.getMessage() for r in logs.records if r.name == "mymcp.memory.store"]
    index = service.current_index()
    if isinstance(verdict, SkipReason):
        assert items == []
        assert skips == [
            f"skipped scope=project file={index.file_id(tuple(relative.split('/')))} "
            f"reason={verdict.value}"
        ]
        assert recalled.payload["memories"] == []
        assert inspected.payload["status"] == "not_found"
        return
    reference = reference_of(verdict, Scope.PROJECT).to_json()
    assert [item["reference"] for item in items] == [reference]
    assert skips == []
    assert [m["id"] for m in recalled.payload["memories"]] in ([], [verdict.id])
    if isinstance(verdict, MemoryRecordV2):  # then it sits at its own path: the base one
        assert reference == _BASE_REFERENCE
        assert inspected.payload == {
            "status": "ok",
            "memory": {"reference": reference, **verdict.public_json()},
        }
    else:
        assert inspected.payload["status"] == "not_found"


# --- list cursors: tampering -----------------------------------------------------------------


@pytest.fixture(scope="module")
def listing(tmp_path_factory: pytest.TempPathFactory) -> tuple[MemoryService, CursorCodec, str]:
    root = tmp_path_factory.mktemp("cursors") / "memory"
    for index in range(3):
        _put(root, f"project/legacy-{index}.json", _dump({**_BASE_V1, "id": f"legacy-{index}"}))
    for namespace, collection in [("alpha", None), ("alpha", "c1"), ("beta", None)] * 2:
        body = _v2_body(namespace, collection)
        _put(root, _v2_relative(body), _dump(body))
    codec = CursorCodec.generate()
    service = MemoryService(lambda: root, 10_000, codec)
    first = service.list({"scope": "project", "page_size": 3})
    cursor = first.payload["page"]["next_cursor"]
    assert isinstance(cursor, str)
    assert not service.list({"scope": "project", "cursor": cursor}).is_error
    return service, codec, cursor


def _list_error(service: MemoryService, cursor: str) -> tuple[str, str]:
    outcome = service.list({"scope": "project", "cursor": cursor})
    assert outcome.is_error, "a tampered cursor was accepted"
    return outcome.payload["status"], outcome.payload["code"]


def _names_foreign_instance(token: str, instance: str) -> bool:
    """Whether the token's payload part is JSON naming another instance id."""
    parts = token.split(".")
    if len(parts) != 2:
        return False
    try:
        body = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("p"), str) and body["p"] != instance


_CURSOR_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ é\x00"


@st.composite
def _tampered(draw: st.DrawFn, token: str) -> str:
    chars = list(token)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "insert", "delete"]))
        if kind == "insert" or not chars:
            chars.insert(draw(st.integers(0, len(chars))), draw(st.sampled_from(_CURSOR_CHARS)))
        elif kind == "flip":
            where = draw(st.integers(0, len(chars) - 1))
            others = [c for c in _CURSOR_CHARS if c != chars[where]]
            chars[where] = draw(st.sampled_from(others))
        else:
            where = draw(st.integers(0, len(chars) - 1))
            del chars[where : where + draw(st.integers(1, 4))]
    tampered = "".join(chars)
    # Deleting then re-inserting the same character restores the token: not tampering.
    return tampered if tampered != token else tampered + "A"


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_tampered_cursors_are_invalid(
    listing: tuple[MemoryService, CursorCodec, str], data: st.DataObject
) -> None:
    service, codec, cursor = listing
    tampered = data.draw(_tampered(cursor))
    outcome = _list_error(service, tampered)
    if outcome == STALE:
        # Only a payload that still names an instance, and not this one, may be stale.
        assert _names_foreign_instance(tampered, codec.instance_id), tampered
    else:
        assert outcome == INVALID


_STATE_EDITS = st.fixed_dictionaries(
    {},
    optional={
        "offset": st.sampled_from([3, 6, 9]),
        "selector": st.sampled_from(["0" * 64, "f" * 64]),
        "snapshot": st.sampled_from(["0" * 64, "e" * 64]),
    },
)


@settings(max_examples=60, deadline=None)
@given(edits=_STATE_EDITS, key=st.binary(min_size=32, max_size=32))
def test_cursors_signed_with_another_key_are_invalid(
    listing: tuple[MemoryService, CursorCodec, str], edits: dict[str, Any], key: bytes
) -> None:
    service, codec, cursor = listing
    state = replace(codec.decode(cursor), **edits)
    # Same instance id, different key: a forgery of this process's cursor.
    forger = CursorCodec(key, codec.instance_id)
    assert _list_error(service, forger.encode(state)) == INVALID


@settings(max_examples=30, deadline=None)
@given(edits=_STATE_EDITS)
def test_cursors_of_another_instance_are_stale(
    listing: tuple[MemoryService, CursorCodec, str], edits: dict[str, Any]
) -> None:
    service, codec, cursor = listing
    state = replace(codec.decode(cursor), **edits)
    assert _list_error(service, CursorCodec.generate().encode(state)) == STALE


# --- list cursors: any selected change between pages is stale ------------------------------

# (namespace_id, collection_id) of each selector; "-" means the member is omitted.
_SELECTORS = {
    "scope": ("-", "-"),
    "namespace": ("alpha", "-"),
    "collectionless": ("alpha", None),
    "collection": ("alpha", "c1"),
}


def _selector_arguments(name: str) -> dict[str, Any]:
    namespace, collection = _SELECTORS[name]
    arguments: dict[str, Any] = {"scope": "project"}
    if namespace != "-":
        arguments["namespace_id"] = namespace
    if collection != "-":
        arguments["collection_id"] = collection
    return arguments


def _selects(name: str, relative: str) -> bool:
    parts = relative.split("/")
    if parts[0] != "project":
        return False
    namespace, collection = _SELECTORS[name]
    if namespace == "-":
        return True
    is_v2 = parts[-1].startswith("mem_")
    if not is_v2 or parts[1] != namespace:
        return False
    if collection == "-":
        return True
    return parts[2:-1] == ([] if collection is None else [collection])


def _seed_inventory(root: Path) -> dict[str, dict[str, Any]]:
    """Two legacy and nine canonical records in project, one canonical in knowledge."""
    files: dict[str, dict[str, Any]] = {}
    for relative, body in [
        ("project/legacy-a.json", {**_BASE_V1, "id": "legacy-a"}),
        ("project/old/legacy-b.json", {**_BASE_V1, "id": "legacy-b"}),
    ]:
        files[relative] = body
    for namespace, collection in [("alpha", None), ("alpha", "c1"), ("beta", None)] * 3:
        body = _v2_body(namespace, collection)
        files[_v2_relative(body)] = body
    other = {**_v2_body("alpha"), "scope": "knowledge"}
    other["namespace"] = {"kind": "topic", "id": "alpha", "label": None}
    other["kind"] = "reference"
    files[_v2_relative(other)] = other
    for relative, body in files.items():
        _put(root, relative, _dump(body))
    return files


_ADDITIONS = {
    "scope": ["project/new-legacy.json", "project/gamma/{id}.json"],
    "namespace": ["project/alpha/{id}.json", "project/alpha/c2/{id}.json"],
    "collectionless": ["project/alpha/{id}.json"],
    "collection": ["project/alpha/c1/{id}.json"],
}
_OUTSIDE_ADDITIONS = {
    "scope": ["knowledge/alpha/{id}.json", "project/.hidden.tmp"],
    "namespace": ["project/beta/{id}.json", "project/outside-legacy.json"],
    "collectionless": ["project/alpha/c1/{id}.json", "project/beta/{id}.json"],
    "collection": ["project/alpha/{id}.json", "project/alpha/c2/{id}.json"],
}


def _body_for(relative: str) -> dict[str, Any]:
    parts = relative.split("/")
    if not parts[-1].startswith("mem_"):
        return {**_BASE_V1, "id": parts[-1].removesuffix(".json")}
    body = _v2_body(parts[1], parts[2] if len(parts) == 4 else None)
    body["id"] = parts[-1].removesuffix(".json")
    if parts[0] == "knowledge":
        body.update(scope="knowledge", kind="reference")
        body["namespace"] = {"kind": "topic", "id": parts[1], "label": None}
    return body


def _apply_change(root: Path, relative: str, body: dict[str, Any], change: str) -> None:
    path = root / relative
    if change == "edit":
        _put(root, relative, _dump({**body, "content": body["content"] + " edited"}), settled=False)
    elif change == "same-size-edit":
        _put(root, relative, _dump({**body, "content": body["content"][:-1] + "Z"}), settled=False)
    elif change == "lifecycle" and body["schema_version"] == 2:
        _put(
            root,
            relative,
            _dump({**body, "lifecycle": {"state": "archived", "revision": 2}}),
            settled=False,
        )
    elif change == "corrupt":
        _put(root, relative, b'{"schema_version": 2', settled=False)
    elif change == "relocate":
        # One directory deeper: a legacy record keeps its id under a new path, a
        # canonical one no longer agrees with its path.
        moved = path.parent / "moved" / path.name
        moved.parent.mkdir(exist_ok=True)
        path.rename(moved)
    else:  # delete (and lifecycle of a legacy record, which has none)
        path.unlink()


@settings(max_examples=80, deadline=None)
@given(
    selector=st.sampled_from(sorted(_SELECTORS)),
    change=st.sampled_from(
        ["edit", "same-size-edit", "lifecycle", "corrupt", "relocate", "delete", "add"]
    ),
    inside=st.booleans(),
    pick=st.integers(0, 10**6),
    later_page=st.booleans(),
)
def test_selected_changes_between_pages_make_the_cursor_stale(
    selector: str, change: str, inside: bool, pick: int, later_page: bool
) -> None:
    with _temp_root() as root:
        files = _seed_inventory(root)
        service = _service(root)
        arguments = _selector_arguments(selector)
        page = service.list({**arguments, "page_size": 1}).payload
        cursor = page["page"]["next_cursor"]
        assert isinstance(cursor, str), page
        if later_page:
            cursor = service.list({**arguments, "cursor": cursor}).payload["page"]["next_cursor"]
            assert isinstance(cursor, str)
        if change == "add":
            choices = (_ADDITIONS if inside else _OUTSIDE_ADDITIONS)[selector]
            relative = choices[pick % len(choices)].format(id="mem_" + uuid.uuid4().hex)
            data = b"not json" if relative.endswith(".tmp") else _dump(_body_for(relative))
            _put(root, relative, data, settled=False)
        else:
            targets = sorted(r for r in files if _selects(selector, r) == inside)
            relative = targets[pick % len(targets)]
            _apply_change(root, relative, files[relative], change)
        outcome = service.list({**arguments, "cursor": cursor})
    if inside:
        assert outcome.is_error, f"{change} of {relative} kept the cursor valid"
        assert (outcome.payload["status"], outcome.payload["code"]) == STALE
    else:
        assert not outcome.is_error, (change, relative, outcome.payload)
        assert outcome.payload["page"]["number"] == (3 if later_page else 2)


# --- mutations: revisions and references ------------------------------------------------------

_TEXTS = [
    ("Consent boundary", "Durable memory needs approval.", ["consent"]),
    # Normalises to the same state as the first: a revise with it is a no-op.
    ("  Consent boundary\r\n", "Durable memory needs approval.\r\n ", [" consent "]),
    (None, "Approval is per call.", []),
    ("Other", "Something else entirely.", ["x", "y  z"]),
]
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("revise"), st.integers(0, len(_TEXTS) - 1)),
        st.tuples(st.sampled_from(["archive", "restore", "duplicate", "stale"]), st.just(0)),
    ),
    min_size=1,
    max_size=12,
)
_CHANGED = {"revise": "revised", "archive": "archived", "restore": "restored"}
_UNCHANGED = {
    "revise": "already_current",
    "archive": "already_archived",
    "restore": "already_active",
}


def _remember_args(title: str | None, content: str, tags: list[str]) -> dict[str, Any]:
    return {
        "scope": "project",
        "namespace": {"kind": "project", "id": "alpha", "label": "Alpha"},
        "collection": {"id": "c1", "label": "C one"},
        "kind": "decision",
        "language": "EN",
        "title": title,
        "content": content,
        "tags": tags,
        "origin": "user_approved_proposal",
    }


def _normal(title: str | None, content: str, tags: list[str]) -> tuple[Any, ...]:
    return (
        None if title is None else normalize_text(title),
        normalize_text(content),
        list(normalize_tags(tags, minimum=0) or ()),
    )


@settings(max_examples=60, deadline=None)
@given(ops=_OPS)
def test_revision_strictly_increases_and_every_reference_inspects_to_the_reported_state(
    ops: list[tuple[str, int]],
) -> None:
    with _temp_root() as tmp:
        root = tmp / "missing-yet"
        reads = _service(root)
        writes = MutationService(reads, 10_000)

        def inspect_reported(result: dict[str, Any]) -> dict[str, Any]:
            # The reference is passed to inspect exactly as the mutation returned it.
            inspected = reads.inspect({"reference": result["reference"]}).payload
            assert inspected["status"] == "ok", inspected
            memory: dict[str, Any] = inspected["memory"]
            assert memory["reference"] == result["reference"]
            assert memory["lifecycle"] == result["lifecycle"]
            return memory

        first = writes.remember(_remember_args(*_TEXTS[0])).payload
        assert first["status"] == "remembered", first
        assert first["reference"]["schema_version"] == 2
        reference = first["reference"]
        path = root / "project" / "alpha" / "c1" / (reference["id"] + ".json")
        memory = inspect_reported(first)
        state, revision = "active", 1
        text = _normal(*_TEXTS[0])
        created = memory["created_at"]
        updated = memory["updated_at"]
        changes = 0

        for op, choice in ops:
            before = path.read_bytes()
            target = {"reference": reference, "expected_revision": revision}
            if op == "duplicate":
                title, content, tags = text
                result = writes.remember(_remember_args(title, content, tags)).payload
                expected = "already_exists" if state == "active" else "existing_archived"
                assert result["status"] == expected, result
            elif op == "stale":
                stale = revision + 1 if revision == 1 else revision - 1
                result = writes.archive({"reference": reference, "expected_revision": stale})
                assert result.payload["code"] == "revision_conflict", result.payload
                assert path.read_bytes() == before
                continue
            elif op == "revise":
                title, content, tags = _TEXTS[choice]
                result = writes.revise(
                    {
                        **target,
                        "namespace_label": "Alpha",
                        "collection_label": "C one",
                        "title": title,
                        "content": content,
                        "tags": tags,
                    }
                ).payload
                wanted = _normal(title, content, tags)
                changed = wanted != text
                text = wanted
            else:
                result = getattr(writes, op)(target).payload
                wanted_state = "archived" if op == "archive" else "active"
                changed = wanted_state != state
                state = wanted_state
            if op != "duplicate":
                assert result["status"] == (_CHANGED if changed else _UNCHANGED)[op], result
                if changed:
                    changes += 1
                    assert result["lifecycle"]["revision"] == revision + 1  # strictly up by one
                    revision += 1
                else:
                    assert path.read_bytes() == before  # a no-op writes nothing
            assert result["reference"] == reference
            assert result["lifecycle"] == {"state": state, "revision": revision}
            memory = inspect_reported(result)
            assert (memory["title"], memory["content"], memory["tags"]) == text
            assert memory["created_at"] == created
            assert memory["updated_at"] >= updated
            updated = memory["updated_at"]
        assert revision == 1 + changes
        assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


# --- the content policy never echoes the value ---------------------------------------------

_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _run(alphabet: str, low: int, high: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=low, max_size=high)


def _luhn_complete(body: str) -> str:
    total = 0
    for position, char in enumerate(reversed(body)):
        value = int(char)
        if position % 2 == 0:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return body + str((10 - total % 10) % 10)


# Each secret is at most 50 characters without whitespace runs, so it also fits a tag.
_SECRETS = st.one_of(
    _run(_B64URL, 16, 20).map(lambda t: f"-----BEGIN PRIVATE KEY-----{t}"),
    _run(_UPPER, 16, 16).map(lambda t: f"AKIA{t}"),
    _run(_ALNUM, 20, 30).map(lambda t: f"ghp_{t}"),
    _run(_ALNUM, 6, 20).map(lambda t: f"password={t}"),
    st.tuples(_run(_B64URL, 8, 14), _run(_B64URL, 4, 10), _run(_B64URL, 4, 10)).map(
        lambda t: f"eyJ{t[0]}.{t[1]}.{t[2]}"
    ),
    st.tuples(st.integers(0, 999), st.integers(0, 99), st.integers(0, 9999)).map(
        lambda t: f"{t[0]:03d}-{t[1]:02d}-{t[2]:04d}"
    ),
    _run("0123456789", 15, 15).map(
        lambda d: "-".join(_luhn_complete("4" + d[1:])[i : i + 4] for i in range(0, 16, 4))
    ),
)
_PROSE = st.sampled_from(["", "note ", "keep this in mind "])

_REMEMBER_FIELDS = {
    "namespace.id": "namespace",
    "namespace.label": "namespace",
    "collection.id": "collection",
    "collection.label": "collection",
    "title": "title",
    "content": "content",
    "tags": "tags",
}
_REVISE_FIELDS = ("namespace_label", "collection_label", "title", "content", "tags")


@pytest.fixture(scope="module")
def policy_memory(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[MemoryService, MutationService, dict[str, Any]]:
    root = tmp_path_factory.mktemp("policy") / "memory"
    reads = _service(root)
    writes = MutationService(reads, 10_000)
    result = writes.remember(_remember_args("Plain title", "Plain content.", ["plain"])).payload
    assert result["status"] == "remembered"
    return reads, writes, result["reference"]


@settings(max_examples=150, deadline=None)
@given(
    secret=_SECRETS,
    prose=_PROSE,
    tool=st.sampled_from(["remember", "revise"]),
    pick=st.integers(0, 100),
)
def test_refusals_never_echo_the_value(
    policy_memory: tuple[MemoryService, MutationService, dict[str, Any]],
    secret: str,
    prose: str,
    tool: str,
    pick: int,
) -> None:
    reads, writes, reference = policy_memory
    root = reads.current_index().root
    if tool == "remember":
        arguments = _remember_args("Plain title", "Plain content.", ["plain"])
        # An id must still be a valid identifier, or the request fails validation first.
        eligible = [f for f in _REMEMBER_FIELDS if not f.endswith(".id") or is_identifier(secret)]
        field = eligible[pick % len(eligible)]
        public = _REMEMBER_FIELDS[field]
        # Ids and tags keep their length limits (64 and 50), so they hold the bare secret.
        value = secret if field.endswith(".id") or field == "tags" else prose + secret
        holder, _, member = field.partition(".")
        if member:
            arguments[holder] = {**arguments[holder], member: value}
        else:
            arguments[field] = [value] if field == "tags" else value
    else:
        field = public = _REVISE_FIELDS[pick % len(_REVISE_FIELDS)]
        value = secret if field == "tags" else prose + secret
        arguments = {
            "reference": reference,
            "expected_revision": 1,
            "namespace_label": "Alpha",
            "collection_label": "C one",
            "title": None,
            "content": "Plain.",
            "tags": [],
            field: [value] if field == "tags" else value,
        }
    reason = find_disallowed(value)
    assert isinstance(reason, PolicyReason), value  # the generator makes real secrets

    before = tree_snapshot(root)
    with _captured_logs() as logs:
        outcome = getattr(writes, tool)(arguments)
    payload = outcome.payload
    assert outcome.is_error
    assert payload == {
        "status": "refused",
        "code": "disallowed_content",
        "field": public,
        "reason": reason.value,
        "message": payload["message"],
    }
    rendered = json.dumps(payload, ensure_ascii=False) + repr(payload)
    assert secret not in rendered
    assert normalize_text(value) not in rendered
    assert logs.records, "the refusal must still be logged"
    for line in logs.lines:
        assert secret not in line
        assert normalize_text(value) not in line
    assert payload["message"] == ErrorCode.DISALLOWED_CONTENT.message
    assert tree_snapshot(root) == before

"""The mutation service: every status and code of remember, revise, archive, restore, forget."""

from __future__ import annotations

import copy
import itertools
import json
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mymcp.plugins.mnemosyne.memory import (
    CursorCodec,
    ErrorCode,
    MemoryService,
    MutationService,
    ToolOutcome,
    error_payload,
    parse_record,
)
from mymcp.plugins.mnemosyne.memory.tools import REMEMBER

from .conftest import remember_args, tree_snapshot

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]

MEM_ID = "mem_0123456789abcdef0123456789abcdef"


def ticking_clock() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"2026-03-01T00:{next(counter) // 60:02d}:{next(counter) % 60:02d}Z"


class Memory:
    """A read service and a mutation service sharing one root and one index."""

    def __init__(self, root: Path, *, candidate_limit: int = 10_000, **kwargs: Any) -> None:
        self.root = root
        self.reads = MemoryService(lambda: root, 10_000, CursorCodec.generate())
        self.writes = MutationService(
            self.reads, candidate_limit, clock=kwargs.pop("clock", ticking_clock()), **kwargs
        )

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        service = self.reads if tool in ("recall", "list", "inspect") else self.writes
        outcome: ToolOutcome = getattr(service, tool)(arguments)
        assert outcome.is_error == (outcome.payload["status"] in ERROR_STATUSES)
        return outcome.payload

    def inspect(self, reference: dict[str, Any]) -> dict[str, Any]:
        return self.call("inspect", {"reference": reference})

    def remember(self, **overrides: Any) -> dict[str, Any]:
        return self.call("remember", remember_args(**overrides))


ERROR_STATUSES = {
    "invalid_request",
    "policy_error",
    "refused",
    "not_found",
    "conflict",
    "uncertain",
    "storage_error",
    "internal_error",
}


def event_args(
    occurred_at: str | None = "2026-07-20T15:00:00Z", **overrides: Any
) -> dict[str, Any]:
    return remember_args(
        kind="event",
        collection={"id": "events", "label": None},
        title="Track activated",
        content="Track 021 moved to active execution.",
        occurred_at=occurred_at,
        **overrides,
    )


def revise_args(reference: dict[str, Any], revision: Any, **overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "reference": reference,
        "expected_revision": revision,
        "namespace_label": "Mnemosyne",
        "collection_label": "Decisions",
        "title": "Remember consent boundary",
        "content": "Durable memory requires approval for each exact tool call.",
        "tags": ["architecture", "consent"],
    }
    args.update(overrides)
    return args


def record_file(root: Path, reference: dict[str, Any]) -> Path:
    parts = [reference["scope"], reference["namespace_id"]]
    if reference["collection_id"] is not None:
        parts.append(reference["collection_id"])
    return root.joinpath(*parts, reference["id"] + ".json")


@pytest.fixture(autouse=True)
def no_temp_files_left(tmp_path: Path) -> Iterator[None]:
    yield
    assert list(tmp_path.rglob("*.tmp")) == []


@pytest.fixture
def memory(root: Path) -> Memory:
    return Memory(root)


@pytest.fixture
def remembered(memory: Memory) -> dict[str, Any]:
    result = memory.remember()
    assert result["status"] == "remembered"
    return result


# --- remember --------------------------------------------------------------------------------


def test_remember_creates_one_canonical_record(tmp_path: Path) -> None:
    root = tmp_path / "home" / ".mnemosyne" / "memory"
    memory = Memory(root)
    result = memory.remember()
    assert set(result) == {"status", "reference", "lifecycle"}
    assert result["status"] == "remembered"
    reference = result["reference"]
    assert reference["schema_version"] == 2  # usable by memory_inspect unchanged
    assert reference["scope"] == "project"
    assert (reference["namespace_id"], reference["collection_id"]) == ("mnemosyne", "decisions")
    assert re.fullmatch("mem_[0-9a-f]{32}", reference["id"])
    assert result["lifecycle"] == {"state": "active", "revision": 1}

    path = record_file(root, reference)
    data = path.read_bytes()
    record = parse_record(data)
    assert data == (json.dumps(record.to_json(), indent=2, ensure_ascii=False) + "\n").encode()
    assert record.provenance.to_json() == {  # type: ignore[union-attr]
        "origin": "user_approved_proposal",
        "recorded_via": "memory_remember",
    }
    assert "occurred_at" not in json.loads(data)
    # Lazily created from the nearest existing ancestor, every new directory private.
    for directory in (
        tmp_path / "home",
        root.parent,
        root,
        root / "project",
        root / "project" / "mnemosyne",
        path.parent,
    ):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp left behind

    inspected = memory.inspect(reference)
    assert inspected["status"] == "ok"
    assert inspected["memory"]["reference"] == reference
    assert inspected["memory"]["created_at"] == inspected["memory"]["updated_at"]
    recalled = memory.call("recall", {"query": "consent boundary", "scope": "project"})
    assert [m["reference"] for m in recalled["memories"]] == [reference]


def test_remember_normalizes_before_storing(memory: Memory) -> None:
    result = memory.remember(
        language="  EN-us ",
        title="  Cafe\u0301 title\r\n",
        content="line one\r\nline two  ",
        tags=["  multi   word ", "Other"],
        collection=None,
    )
    inspected = memory.inspect(result["reference"])["memory"]
    assert inspected["language"] == "en-us"
    assert inspected["title"] == "Caf\u00e9 title"
    assert inspected["content"] == "line one\nline two"
    assert inspected["tags"] == ["multi word", "Other"]
    assert inspected["collection"] is None
    assert result["reference"]["collection_id"] is None
    null_language = memory.remember(language=None, content="Another memory.")
    assert memory.inspect(null_language["reference"])["memory"]["language"] == "und"


def test_exact_duplicate_is_already_exists_and_writes_nothing(
    memory: Memory, remembered: dict[str, Any], root: Path
) -> None:
    before = tree_snapshot(root)
    # Same normalized identity: tags compare casefolded and in any order.
    again = memory.remember(
        tags=["CONSENT", "architecture"],
        content=" Durable memory requires approval for each exact tool call.\n",
    )
    assert again == {**remembered, "status": "already_exists"}
    assert tree_snapshot(root) == before
    different = memory.remember(title="Another title")
    assert different["status"] == "remembered"
    assert different["reference"]["id"] != remembered["reference"]["id"]


def test_archived_duplicate_is_existing_archived(
    memory: Memory, remembered: dict[str, Any], root: Path
) -> None:
    archived = memory.call(
        "archive", {"reference": remembered["reference"], "expected_revision": 1}
    )
    assert archived["status"] == "archived"
    before = tree_snapshot(root)
    again = memory.remember()
    assert again == {
        "status": "existing_archived",
        "reference": remembered["reference"],
        "lifecycle": {"state": "archived", "revision": 2},
    }
    assert tree_snapshot(root) == before


def test_duplicate_identity_is_per_location(memory: Memory, remembered: dict[str, Any]) -> None:
    assert memory.remember(collection=None)["status"] == "remembered"
    assert memory.remember(collection={"id": "other", "label": None})["status"] == "remembered"
    namespace = {"kind": "project", "id": "elsewhere", "label": None}
    assert memory.remember(namespace=namespace)["status"] == "remembered"
    assert memory.remember(kind="constraint")["status"] == "remembered"
    # Labels are not identity: same record, different label text.
    relabelled = memory.remember(collection={"id": "decisions", "label": "Renamed"})
    assert relabelled["status"] == "already_exists"


def test_event_identity_includes_occurred_at(memory: Memory, root: Path) -> None:
    first = memory.call("remember", event_args())
    assert first["status"] == "remembered"
    stored = json.loads(record_file(root, first["reference"]).read_text())
    assert stored["occurred_at"] == "2026-07-20T15:00:00Z"
    assert memory.call("remember", event_args())["status"] == "already_exists"
    later = memory.call("remember", event_args("2026-07-21T15:00:00Z"))
    assert later["status"] == "remembered"
    assert later["reference"]["id"] != first["reference"]["id"]


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(event_args(occurred_at=None), id="event-null"),
        pytest.param(
            {k: v for k, v in event_args().items() if k != "occurred_at"}, id="event-absent"
        ),
        pytest.param(event_args("2026-07-20 15:00:00Z"), id="event-space"),
        pytest.param(event_args("2026-07-20T15:00:00.5Z"), id="event-fraction"),
        pytest.param(event_args("2026-07-20T15:00:00+00:00"), id="event-offset"),
        pytest.param(event_args("2026-02-30T15:00:00Z"), id="event-impossible"),
        pytest.param(remember_args(occurred_at="2026-07-20T15:00:00Z"), id="non-event-timed"),
        pytest.param(remember_args(occurred_at=None), id="non-event-null"),
    ],
)
def test_occurred_at_is_required_exactly_for_events(
    tmp_path: Path, arguments: dict[str, Any]
) -> None:
    memory = Memory(tmp_path / "memory")
    result = memory.call("remember", arguments)
    assert (result["status"], result["code"]) == ("invalid_request", "invalid_record")
    assert not (tmp_path / "memory").exists()


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in remember_args().items() if k != key}


# (id, arguments, code, field, reason): every argument error names its field and why.
INVALID_REMEMBER = [
    ("not-an-object", ["scope"], "invalid_request", None, "wrong_type"),
    ("missing-title", _without("title"), "invalid_record", "title", "missing"),
    ("missing-scope", _without("scope"), "invalid_scope", "scope", "missing"),
    ("missing-origin", _without("origin"), "invalid_origin", "origin", "missing"),
    ("unknown-field", remember_args(id=MEM_ID), "invalid_request", "id", "unexpected"),
    ("consent-field", remember_args(confirmed=True), "invalid_request", "confirmed", "unexpected"),
    ("odd-field", remember_args(**{"bad key!": 1}), "invalid_request", None, "unexpected"),
    ("scope", remember_args(scope="work"), "invalid_scope", "scope", "not_allowed"),
    ("scope-type", remember_args(scope=1), "invalid_scope", "scope", "wrong_type"),
    (
        "namespace-kind",
        remember_args(namespace={"kind": "topic", "id": "x", "label": None}),
        "invalid_namespace",
        "namespace.kind",
        "not_allowed",
    ),
    (
        "namespace-id",
        remember_args(namespace={"kind": "project", "id": "Bad", "label": None}),
        "invalid_namespace",
        "namespace.id",
        "malformed",
    ),
    (
        "namespace-label",
        remember_args(namespace={"kind": "project", "id": "x", "label": "x" * 101}),
        "invalid_namespace",
        "namespace.label",
        "too_long",
    ),
    (
        "namespace-extra",
        remember_args(namespace={"kind": "project", "id": "x", "label": None, "path": "/"}),
        "invalid_namespace",
        "namespace",
        "unexpected",
    ),
    (
        "namespace-missing-label",
        remember_args(namespace={"kind": "project", "id": "x"}),
        "invalid_namespace",
        "namespace.label",
        "missing",
    ),
    (
        "collection-id",
        remember_args(collection={"id": "../x", "label": None}),
        "invalid_collection",
        "collection.id",
        "malformed",
    ),
    (
        "collection-label",
        remember_args(collection={"id": "c", "label": " "}),
        "invalid_collection",
        "collection.label",
        "blank",
    ),
    (
        "collection-type",
        remember_args(collection="decisions"),
        "invalid_collection",
        "collection",
        "wrong_type",
    ),
    ("kind", remember_args(kind="preference"), "invalid_kind", "kind", "not_allowed"),
    ("kind-type", remember_args(kind=None), "invalid_kind", "kind", "wrong_type"),
    (
        "language",
        remember_args(language="english language"),
        "invalid_record",
        "language",
        "malformed",
    ),
    ("title-long", remember_args(title="t" * 201), "invalid_record", "title", "too_long"),
    ("title-blank", remember_args(title="  "), "invalid_record", "title", "blank"),
    ("content-blank", remember_args(content=" \r\n "), "invalid_record", "content", "blank"),
    # Text that draws nothing is blank too: zero-width, joiners, a Hangul filler, a BOM.
    (
        "content-invisible",
        remember_args(content="\u200b \u2060\ufeff"),
        "invalid_record",
        "content",
        "blank",
    ),
    ("title-invisible", remember_args(title="\u3164"), "invalid_record", "title", "blank"),
    # Symbols whose glyph is empty pass for blanks too.
    ("title-empty-glyph", remember_args(title="\u2800\u2800"), "invalid_record", "title", "blank"),
    (
        "content-empty-glyph",
        remember_args(content="\U0001d159"),
        "invalid_record",
        "content",
        "blank",
    ),
    ("tag-invisible", remember_args(tags=["ok", "\u200b"]), "invalid_record", "tags", "blank"),
    ("content-long", remember_args(content="c" * 4001), "invalid_record", "content", "too_long"),
    ("content-null", remember_args(content=None), "invalid_record", "content", "wrong_type"),
    ("tags-duplicate", remember_args(tags=["Tea", "tea"]), "invalid_record", "tags", "duplicate"),
    (
        "tags-eleven",
        remember_args(tags=[f"t{i}" for i in range(11)]),
        "invalid_record",
        "tags",
        "too_many",
    ),
    ("tags-long", remember_args(tags=["t" * 51]), "invalid_record", "tags", "too_long"),
    ("tags-string", remember_args(tags="tea"), "invalid_record", "tags", "wrong_type"),
    ("origin-manual", remember_args(origin="manual"), "invalid_origin", "origin", "not_allowed"),
    ("origin-import", remember_args(origin="import"), "invalid_origin", "origin", "not_allowed"),
    ("origin-null", remember_args(origin=None), "invalid_origin", "origin", "wrong_type"),
    (
        "event-without-time",
        remember_args(kind="event"),
        "invalid_record",
        "occurred_at",
        "missing",
    ),
    (
        "time-without-event",
        remember_args(occurred_at="2026-01-01T00:00:00Z"),
        "invalid_record",
        "occurred_at",
        "unexpected",
    ),
]


@pytest.mark.parametrize(
    ("arguments", "code", "field", "reason"),
    [pytest.param(a, c, f, r, id=i) for i, a, c, f, r in INVALID_REMEMBER],
)
def test_invalid_remember_is_rejected_before_any_filesystem_access(
    tmp_path: Path, arguments: Any, code: str, field: str | None, reason: str
) -> None:
    root = tmp_path / "memory"
    result = Memory(root).call("remember", arguments)
    expected = {"status": "invalid_request", "code": code, "reason": reason}
    if field is not None:
        expected["field"] = field
    assert result == {**expected, "message": result["message"]}
    # The message explains the rule for the named field and never echoes a value.
    if field is not None and reason != "unexpected":
        assert result["message"].startswith(field)
    if reason == "missing":  # said once: "namespace.label is required and is ..."
        assert result["message"].count("is required") == 1, result["message"]
    for value in ("hunter", "english language", "../x", "decisions", "/"):
        assert value not in result["message"]
    assert not root.exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"namespace": {"kind": "project", "id": "123-45-6789", "label": None}}, "namespace"),
        ({"namespace": {"kind": "project", "id": "x", "label": "pwd: hunter22"}}, "namespace"),
        ({"collection": {"id": "c", "label": "AKIAABCDEFGHIJKLMNOP"}}, "collection"),
        ({"title": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln"}, "title"),
        ({"content": "card 4111 1111 1111 1111"}, "content"),
        ({"tags": ["fine", "-----BEGIN PRIVATE KEY-----"]}, "tags"),
    ],
)
def test_disallowed_content_is_refused_without_touching_the_root(
    tmp_path: Path, overrides: dict[str, Any], field: str
) -> None:
    root = tmp_path / "memory"
    result = Memory(root).call("remember", remember_args(**overrides))
    assert result["status"] == "refused"
    assert result["code"] == "disallowed_content"
    assert result["field"] == field
    assert result["reason"] in {
        "private_key_shape",
        "credential_shape",
        "compact_token_shape",
        "government_identifier_shape",
        "payment_card_shape",
    }
    assert set(result) == {"status", "code", "field", "reason", "message"}
    assert not root.exists()


def test_duplicate_scan_honours_the_candidate_limit(root: Path) -> None:
    generous = Memory(root)
    assert generous.remember()["status"] == "remembered"
    assert generous.remember(title="Second")["status"] == "remembered"
    tight = Memory(root, candidate_limit=1)
    before = tree_snapshot(root)
    result = tight.remember(title="Third")
    assert (result["status"], result["code"]) == ("storage_error", "candidate_limit_exceeded")
    assert tree_snapshot(root) == before


def test_remember_never_grows_a_scope_past_the_candidate_limit(root: Path) -> None:
    # Each container stays small, but the scope as a whole reaches the limit: remember
    # refuses there, so scope-wide recall and list keep working.
    memory = Memory(root, candidate_limit=3)
    memory.reads = MemoryService(lambda: root, 3, CursorCodec.generate())
    memory.writes = MutationService(memory.reads, 3)
    for number in range(3):
        collection = {"id": f"c{number}", "label": None}
        assert memory.remember(collection=collection)["status"] == "remembered"
    before = tree_snapshot(root)
    refused = memory.remember(collection={"id": "c9", "label": None})
    assert (refused["status"], refused["code"]) == ("storage_error", "candidate_limit_exceeded")
    assert tree_snapshot(root) == before
    listed = memory.call("list", {"scope": "project"})
    assert listed["page"]["total_count"] == 3
    # An identical memory is still reported as existing: nothing would be added.
    assert memory.remember(collection={"id": "c0", "label": None})["status"] == "already_exists"


def test_files_added_by_hand_elsewhere_in_the_scope_count_against_the_limit(
    root: Path, write: Writer, v1: Factory
) -> None:
    memory = Memory(root, candidate_limit=5)
    memory.reads = MemoryService(lambda: root, 5, CursorCodec.generate())
    memory.writes = MutationService(memory.reads, 5)
    assert (
        memory.remember(namespace={"kind": "project", "id": "b", "label": None})["status"]
        == "remembered"
    )
    # The index has seen namespace b only; four files appear by hand in namespace a.
    for number in range(4):
        write(v1(memory_id=f"hand-{number}"), f"project/a/hand-{number}.json")
    before = tree_snapshot(root)
    refused = memory.remember(
        namespace={"kind": "project", "id": "b", "label": None}, title="Another"
    )
    assert (refused["status"], refused["code"]) == ("storage_error", "candidate_limit_exceeded")
    assert "already holds 5 candidate files" in refused["message"]
    assert tree_snapshot(root) == before
    listed = memory.call("list", {"scope": "project"})
    assert listed["status"] == "ok"
    assert listed["page"]["total_count"] == 5


def test_generated_id_conflict_is_write_conflict(root: Path) -> None:
    first = Memory(root, id_factory=lambda: MEM_ID).remember()
    assert first["reference"]["id"] == MEM_ID
    before = tree_snapshot(root)
    clash = Memory(root, id_factory=lambda: MEM_ID).remember(title="Different")
    assert (clash["status"], clash["code"]) == ("conflict", "write_conflict")
    assert tree_snapshot(root) == before


def test_unavailable_root_is_a_storage_error(tmp_path: Path) -> None:
    def broken() -> Path:
        raise OSError("no home")

    reads = MemoryService(broken, 10, CursorCodec.generate())
    result = MutationService(reads, 10).remember(remember_args())
    assert (result.payload["status"], result.payload["code"]) == (
        "storage_error",
        "memory_source_unavailable",
    )
    blocker = tmp_path / "file"
    blocker.write_text("x")
    blocked = Memory(blocker / "memory").remember()
    assert blocked["code"] == "memory_source_unavailable"


def test_unexpected_failure_is_internal_error(root: Path) -> None:
    def explode() -> str:
        raise RuntimeError("secret detail /path")

    result = Memory(root, clock=explode).remember()
    assert isinstance(result.pop("request_id"), str)  # what the log line names it by
    assert result == {
        "status": "internal_error",
        "code": "internal_error",
        "message": "an unexpected error occurred",
    }


# --- hypothesis: remember argument validation --------------------------------------------

SCOPE_SHAPES = {
    "self": (["aspect"], ["attribute"]),
    "relationship": (["person", "group", "relationship"], ["perspective", "summary"]),
    "preference": (["domain"], ["preference"]),
    "practice": (["domain"], ["practice"]),
    "project": (["project"], ["decision", "constraint", "state", "question", "reference"]),
    "knowledge": (["topic"], ["reference", "summary"]),
    "agent": (["agent"], ["persona", "policy", "checklist", "failure_mode"]),
}
IDENT = st.from_regex(r"[a-z][a-z0-9_-]{0,20}[a-z]", fullmatch=True)
WORDS = st.lists(
    st.sampled_from(["tea", "green", "Kyoto", "notes", "café", "plan", "ship", "v2", "ok"]),
    min_size=1,
    max_size=6,
).map(" ".join)


@st.composite
def valid_remember(draw: st.DrawFn) -> dict[str, Any]:
    scope = draw(st.sampled_from(sorted(SCOPE_SHAPES)))
    namespace_kinds, kinds = SCOPE_SHAPES[scope]
    tags = draw(st.lists(WORDS.filter(lambda w: len(w) <= 50), max_size=10, unique_by=str.casefold))
    return {
        "scope": scope,
        "namespace": {
            "kind": draw(st.sampled_from(namespace_kinds)),
            "id": draw(IDENT),
            "label": draw(st.none() | WORDS),
        },
        "collection": draw(
            st.none() | st.fixed_dictionaries({"id": IDENT, "label": st.none() | WORDS})
        ),
        "kind": draw(st.sampled_from(kinds)),
        "language": draw(st.sampled_from([None, "en", "PT-br", " de "])),
        "title": draw(st.none() | WORDS),
        "content": draw(WORDS),
        "tags": tags,
        "origin": draw(st.sampled_from(["explicit_user_statement", "user_approved_proposal"])),
    }


@settings(max_examples=60, deadline=None)
@given(arguments=valid_remember())
def test_generated_valid_arguments_parse(arguments: dict[str, Any]) -> None:
    request = REMEMBER.parse(copy.deepcopy(arguments))
    assert request.scope.value == arguments["scope"]
    assert request.namespace.id == arguments["namespace"]["id"]
    assert len(request.tags) == len(arguments["tags"])
    assert request.occurred_at is None


BREAKERS: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (lambda a: a.update(scope="nowhere"), "invalid_scope"),
    (lambda a: a["namespace"].update(kind="galaxy"), "invalid_namespace"),
    (lambda a: a["namespace"].update(id="UPPER"), "invalid_namespace"),
    (lambda a: a.update(collection={"id": "-x", "label": None}), "invalid_collection"),
    (lambda a: a.update(kind="event_horizon"), "invalid_kind"),
    (lambda a: a.update(content=""), "invalid_record"),
    (lambda a: a.update(title=""), "invalid_record"),
    (lambda a: a.update(tags=["same", "SAME"]), "invalid_record"),
    (lambda a: a.update(language="e"), "invalid_record"),
    (lambda a: a.update(occurred_at="2026-01-01T00:00:00Z"), "invalid_record"),
    (lambda a: a.update(extra=1), "invalid_request"),
    (lambda a: a.pop("tags"), "invalid_record"),
    (lambda a: a.update(origin="manual"), "invalid_origin"),
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(arguments=valid_remember(), breaker=st.sampled_from(BREAKERS))
def test_generated_invalid_arguments_get_their_code_and_write_nothing(
    tmp_path: Path, arguments: dict[str, Any], breaker: tuple[Callable[[dict[str, Any]], None], str]
) -> None:
    mutate, code = breaker
    mutate(arguments)
    root = tmp_path / "never"
    result = Memory(root).call("remember", arguments)
    assert (result["status"], result["code"]) == ("invalid_request", code)
    assert not root.exists()


# --- revise ---------------------------------------------------------------------------------


def test_revise_replaces_the_mutable_text(
    memory: Memory, remembered: dict[str, Any], root: Path
) -> None:
    reference = remembered["reference"]
    before = memory.inspect(reference)["memory"]
    result = memory.call(
        "revise",
        revise_args(
            reference,
            1,
            namespace_label=None,
            collection_label="Architecture decisions",
            title=None,
            content="Every mutation needs per-call approval.",
            tags=[],
        ),
    )
    assert result == {
        "status": "revised",
        "reference": reference,
        "lifecycle": {"state": "active", "revision": 2},
    }
    after = memory.inspect(reference)["memory"]
    assert after["namespace"] == {"kind": "project", "id": "mnemosyne", "label": None}
    assert after["collection"] == {"id": "decisions", "label": "Architecture decisions"}
    assert (after["title"], after["content"], after["tags"]) == (
        None,
        "Every mutation needs per-call approval.",
        [],
    )
    for unchanged in ("id", "scope", "kind", "language", "provenance", "created_at"):
        assert after[unchanged] == before[unchanged]
    assert after["updated_at"] > before["updated_at"]
    assert len(list(record_file(root, reference).parent.iterdir())) == 1


def test_revise_no_op_is_already_current_without_a_write(
    memory: Memory, remembered: dict[str, Any], root: Path
) -> None:
    reference = remembered["reference"]
    before = tree_snapshot(root)
    result = memory.call(
        "revise",
        revise_args(
            reference,
            1,
            content="Durable memory requires approval for each exact tool call.\r\n",
            tags=["architecture", " consent "],
        ),
    )
    assert result == {**remembered, "status": "already_current"}
    assert tree_snapshot(root) == before


def test_stale_revision_conflicts_before_no_op_detection(
    memory: Memory, remembered: dict[str, Any]
) -> None:
    result = memory.call("revise", revise_args(remembered["reference"], 2))
    assert (result["status"], result["code"]) == ("conflict", "revision_conflict")


def test_archived_memory_can_be_revised_and_stays_archived(
    memory: Memory, remembered: dict[str, Any]
) -> None:
    reference = remembered["reference"]
    memory.call("archive", {"reference": reference, "expected_revision": 1})
    result = memory.call("revise", revise_args(reference, 2, content="Revised while archived."))
    assert result["lifecycle"] == {"state": "archived", "revision": 3}
    recalled = memory.call("recall", {"query": "revised archived", "scope": "project"})
    assert recalled["status"] == "no_matches"


def test_collectionless_revise_takes_no_collection_label(memory: Memory) -> None:
    result = memory.remember(collection=None)
    reference = result["reference"]
    args = revise_args(reference, 1, content="New text.")
    del args["collection_label"]
    assert memory.call("revise", args)["status"] == "revised"
    explicit_null = revise_args(reference, 2, content="Newer text.", collection_label=None)
    assert memory.call("revise", explicit_null)["status"] == "revised"
    text = memory.call("revise", revise_args(reference, 3, collection_label="null"))
    assert (text["status"], text["code"]) == ("invalid_request", "invalid_collection")


def test_collection_label_is_required_for_a_collected_record(
    memory: Memory, remembered: dict[str, Any]
) -> None:
    args = revise_args(remembered["reference"], 1)
    del args["collection_label"]
    result = memory.call("revise", args)
    assert (result["status"], result["code"]) == ("invalid_request", "invalid_collection")
    long_label = memory.call(
        "revise", revise_args(remembered["reference"], 1, collection_label="x" * 101)
    )
    assert long_label["code"] == "invalid_collection"


V2_REF = {
    "schema_version": 2,
    "scope": "project",
    "namespace_id": "mnemosyne",
    "collection_id": "decisions",
    "id": MEM_ID,
}


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        pytest.param([], "invalid_request", id="not-object"),
        pytest.param(
            revise_args({"schema_version": 1, "scope": "project", "id": "x"}, 1),
            "invalid_reference",
            id="legacy",
        ),
        pytest.param(revise_args({**V2_REF, "path": "/tmp"}, 1), "invalid_reference", id="extra"),
        pytest.param(revise_args({**V2_REF, "id": "mem_x"}, 1), "invalid_reference", id="bad-id"),
        pytest.param(revise_args(V2_REF, 0), "invalid_expected_revision", id="zero"),
        pytest.param(revise_args(V2_REF, True), "invalid_expected_revision", id="bool"),
        pytest.param(revise_args(V2_REF, "1"), "invalid_expected_revision", id="string"),
        pytest.param(revise_args(V2_REF, 1.5), "invalid_expected_revision", id="fraction"),
        # Arguments revise does not take are unknown arguments, named as such.
        pytest.param(revise_args(V2_REF, 1, language="de"), "invalid_request", id="language"),
        pytest.param(revise_args(V2_REF, 1, lifecycle="archived"), "invalid_request", id="state"),
        pytest.param(
            {k: v for k, v in revise_args(V2_REF, 1).items() if k != "title"},
            "invalid_record",
            id="missing-title",
        ),
        pytest.param(revise_args(V2_REF, 1, content=" "), "invalid_record", id="blank"),
        pytest.param(
            revise_args(V2_REF, 1, namespace_label="n" * 101), "invalid_record", id="ns-label"
        ),
        pytest.param(revise_args(V2_REF, 1, tags=["a", "A"]), "invalid_record", id="tags"),
    ],
)
def test_invalid_revise_is_rejected(memory: Memory, arguments: Any, code: str) -> None:
    result = memory.call("revise", arguments)
    assert (result["status"], result["code"]) == ("invalid_request", code)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"namespace_label": "secret: abcd1234"}, "namespace_label"),
        ({"collection_label": "123-45-6789"}, "collection_label"),
        ({"title": "ghp_abcdefghijklmnopqrstuvwxyz"}, "title"),
        ({"content": "Authorization: Basic dXNlcjpwYXNz"}, "content"),
        ({"tags": ["ok", "5500 0000 0000 0004"]}, "tags"),
    ],
)
def test_revise_refuses_disallowed_content(
    memory: Memory, remembered: dict[str, Any], root: Path, overrides: dict[str, Any], field: str
) -> None:
    before = tree_snapshot(root)
    result = memory.call("revise", revise_args(remembered["reference"], 1, **overrides))
    assert (result["status"], result["code"], result["field"]) == (
        "refused",
        "disallowed_content",
        field,
    )
    assert tree_snapshot(root) == before


def test_revise_of_a_missing_record_is_not_found(memory: Memory, tmp_path: Path) -> None:
    assert memory.call("revise", revise_args(V2_REF, 1))["status"] == "not_found"
    bare = Memory(tmp_path / "absent")
    assert bare.call("revise", revise_args(V2_REF, 1))["code"] == "not_found"
    assert not (tmp_path / "absent").exists()


# --- archive / restore -----------------------------------------------------------------------


def test_archive_and_restore_are_reversible_and_idempotent(
    memory: Memory, remembered: dict[str, Any], root: Path
) -> None:
    reference = remembered["reference"]
    target = {"reference": reference, "expected_revision": 1}
    archived = memory.call("archive", target)
    assert archived == {
        "status": "archived",
        "reference": reference,
        "lifecycle": {"state": "archived", "revision": 2},
    }
    query = {"query": "consent boundary", "scope": "project"}
    assert memory.call("recall", query)["status"] == "no_matches"
    assert memory.inspect(reference)["memory"]["lifecycle"]["state"] == "archived"

    before = tree_snapshot(root)
    again = memory.call("archive", {"reference": reference, "expected_revision": 2})
    assert again == {**archived, "status": "already_archived"}
    assert tree_snapshot(root) == before
    stale = memory.call("archive", target)  # stale even though already archived
    assert (stale["status"], stale["code"]) == ("conflict", "revision_conflict")

    restored = memory.call("restore", {"reference": reference, "expected_revision": 2})
    assert restored == {
        "status": "restored",
        "reference": reference,
        "lifecycle": {"state": "active", "revision": 3},
    }
    assert memory.call("recall", query)["status"] == "ok"
    before = tree_snapshot(root)
    active = memory.call("restore", {"reference": reference, "expected_revision": 3})
    assert active == {**restored, "status": "already_active"}
    assert tree_snapshot(root) == before


def test_a_record_at_the_last_revision_is_left_as_it_is(
    memory: Memory, remembered: dict[str, Any], root: Path
) -> None:
    # Only a hand edit gets a record there; its next revision could not be read back.
    reference = remembered["reference"]
    path = record_file(root, reference)
    body = json.loads(path.read_bytes())
    body["lifecycle"]["revision"] = 2**53 - 1
    path.write_text(json.dumps(body))
    assert memory.inspect(reference)["memory"]["lifecycle"]["revision"] == 2**53 - 1
    before = tree_snapshot(root)
    refused = memory.call("archive", {"reference": reference, "expected_revision": 2**53 - 1})
    assert (refused["status"], refused["code"]) == ("invalid_request", "invalid_record")
    assert tree_snapshot(root) == before


@pytest.mark.parametrize("tool", ["archive", "restore", "forget"])
@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"reference": V2_REF}, "invalid_expected_revision"),
        ({"expected_revision": 1}, "invalid_reference"),
        ({"reference": V2_REF, "expected_revision": -1}, "invalid_expected_revision"),
        ({"reference": V2_REF, "expected_revision": 2**53}, "invalid_expected_revision"),
        ({"reference": V2_REF, "expected_revision": 10**4299}, "invalid_expected_revision"),
        ({"reference": V2_REF, "expected_revision": 1, "confirm": True}, "invalid_request"),
        (
            {
                "reference": {"schema_version": 1, "scope": "self", "id": "x"},
                "expected_revision": 1,
            },
            "invalid_reference",
        ),
        ({"reference": json.dumps(V2_REF), "expected_revision": 1}, "invalid_reference"),
    ],
)
def test_invalid_lifecycle_requests(
    memory: Memory, tool: str, arguments: dict[str, Any], code: str
) -> None:
    result = memory.call(tool, arguments)
    assert (result["status"], result["code"]) == ("invalid_request", code)


@pytest.mark.parametrize("tool", ["archive", "restore", "forget"])
def test_lifecycle_of_a_missing_record_is_not_found(memory: Memory, tool: str) -> None:
    result = memory.call(tool, {"reference": V2_REF, "expected_revision": 1})
    assert (result["status"], result["code"]) == ("not_found", "not_found")


# --- forget -------------------------------------------------------------------------------


def test_forget_only_deletes_archived_records(
    memory: Memory, remembered: dict[str, Any], root: Path
) -> None:
    reference = remembered["reference"]
    path = record_file(root, reference)
    active = memory.call("forget", {"reference": reference, "expected_revision": 1})
    assert (active["status"], active["code"]) == ("conflict", "not_archived")
    stale = memory.call("forget", {"reference": reference, "expected_revision": 5})
    assert stale["code"] == "revision_conflict"  # stale revision checked before the state
    assert path.exists()

    memory.call("archive", {"reference": reference, "expected_revision": 1})
    stale = memory.call("forget", {"reference": reference, "expected_revision": 1})
    assert stale["code"] == "revision_conflict"
    forgotten = memory.call("forget", {"reference": reference, "expected_revision": 2})
    assert forgotten == {"status": "forgotten", "reference": reference}
    assert not path.exists()
    assert path.parent.is_dir()  # directories are kept
    assert sorted(p.name for p in path.parent.iterdir()) == []  # no tombstone
    assert memory.inspect(reference)["code"] == "not_found"
    again = memory.call("forget", {"reference": reference, "expected_revision": 2})
    assert (again["status"], again["code"]) == ("not_found", "not_found")
    restore = memory.call("restore", {"reference": reference, "expected_revision": 2})
    assert restore["code"] == "not_found"


def test_reads_see_every_write_through_the_shared_index(
    memory: Memory, remembered: dict[str, Any]
) -> None:
    reference = remembered["reference"]
    listed = memory.call("list", {"scope": "project"})
    assert [m["reference"] for m in listed["memories"]] == [reference]
    memory.call("revise", revise_args(reference, 1, title="Fresh title"))
    listed = memory.call("list", {"scope": "project"})
    assert listed["memories"][0]["title"] == "Fresh title"
    memory.call("archive", {"reference": reference, "expected_revision": 2})
    memory.call("forget", {"reference": reference, "expected_revision": 3})
    assert memory.call("list", {"scope": "project"})["memories"] == []


def test_hand_edited_record_is_revised_from_its_current_bytes(
    memory: Memory, remembered: dict[str, Any], root: Path
) -> None:
    reference = remembered["reference"]
    path = record_file(root, reference)
    body = json.loads(path.read_text())
    body["content"] = "Edited by hand."
    body["lifecycle"]["revision"] = 7
    path.write_text(json.dumps(body, indent=2) + "\n")
    stale = memory.call("revise", revise_args(reference, 1))
    assert stale["code"] == "revision_conflict"
    current = memory.call("revise", revise_args(reference, 7))
    assert current["lifecycle"] == {"state": "active", "revision": 8}


def test_mutation_disabled_is_a_policy_error() -> None:
    # Normally unreachable: a gated-off tool is not registered at all (see the adapter
    # and end-to-end tests), but the code keeps its contract status.
    assert error_payload(ErrorCode.MUTATION_DISABLED) == {
        "status": "policy_error",
        "code": "mutation_disabled",
        "message": ErrorCode.MUTATION_DISABLED.message,
    }


def test_whole_numbers_written_as_floats_are_integers(root: Path) -> None:
    memory = Memory(root)
    reference = memory.remember()["reference"]
    spelled = {**reference, "schema_version": 2.0}
    assert memory.inspect(spelled)["status"] == "ok"
    archived = memory.call("archive", {"reference": spelled, "expected_revision": 1.0})
    assert (archived["status"], archived["lifecycle"]["revision"]) == ("archived", 2)
    restored = memory.call("restore", {"reference": reference, "expected_revision": 2e0})
    assert restored["status"] == "restored"
    fraction = memory.call("archive", {"reference": reference, "expected_revision": 3.5})
    assert (fraction["code"], fraction["reason"]) == ("invalid_expected_revision", "wrong_type")
    flag = memory.call("archive", {"reference": reference, "expected_revision": True})
    assert (flag["code"], flag["reason"]) == ("invalid_expected_revision", "wrong_type")

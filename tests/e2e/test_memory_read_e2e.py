"""Mnemosyne reads end to end: recall, list and inspect on the real server over a seeded root.

The memory root is seeded by hand before the server starts, as an operator's files would
be: canonical v2 records (active and archived, with and without a collection), legacy v1
records (one id present twice), a symlinked record file, an oversized file, an invalid
file, an empty scope directory and a missing scope. The official MCP SDK client then
drives the three read tools. Every seeded string carries the marker ``zqx`` so the
server's log output can be checked for content, titles, tags, query text, ids and paths.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.types import TextContent

from tests.e2e.server import Sandbox, serve

MARK = "zqx"
NAMESPACE = "zqxnsmark"
COLLECTION = "zqxcolmark"
SETTLED_AGE_NS = 3600 * 1_000_000_000
ERROR_STATUSES = {
    "invalid_request",
    "policy_error",
    "refused",
    "not_found",
    "conflict",
    "uncertain",
    "storage_error",
    "retrieval_error",
    "internal_error",
}
RECALL_KEYS = {"reference", "id", "scope", "title", "content", "tags", "match"}


def _v2(
    namespace: str,
    collection: str | None,
    number: int,
    *,
    state: str = "active",
    word: str = "orchard",
) -> dict[str, Any]:
    return {
        "schema_version": 2,
        "id": "mem_" + uuid.uuid4().hex,
        "scope": "project",
        "namespace": {"kind": "project", "id": namespace, "label": f"{MARK}nslabel"},
        "collection": None
        if collection is None
        else {"id": collection, "label": f"{MARK}collabel"},
        "kind": "decision",
        "language": "en",
        "title": f"{MARK}title {number}",
        "content": f"{word} apples {MARK}content{number}",
        "tags": [f"{MARK}tag{number}"],
        "provenance": {"origin": "explicit_user_statement", "recorded_via": "memory_remember"},
        "lifecycle": {"state": state, "revision": 2 if state == "archived" else 1},
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-02T00:00:00Z",
    }


def _reference(body: dict[str, Any]) -> dict[str, Any]:
    if body["schema_version"] == 1:
        return {"schema_version": 1, "scope": "project", "id": body["id"]}
    collection = body["collection"]
    return {
        "schema_version": 2,
        "scope": body["scope"],
        "namespace_id": body["namespace"]["id"],
        "collection_id": None if collection is None else collection["id"],
        "id": body["id"],
    }


def _relative(body: dict[str, Any]) -> str:
    reference = _reference(body)
    parts = [reference["scope"], reference["namespace_id"]]
    if reference["collection_id"] is not None:
        parts.append(reference["collection_id"])
    return "/".join([*parts, body["id"] + ".json"])


def _dump(body: dict[str, Any]) -> bytes:
    return (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode()


def _write(root: Path, relative: str, data: bytes) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    settled = time.time_ns() - SETTLED_AGE_NS
    os.utime(path, ns=(settled, settled))
    return path


class Seeded:
    """What the root holds, by role."""

    def __init__(self, root: Path, outside: Path) -> None:
        self.loose = [_v2(NAMESPACE, None, n) for n in range(7)]
        self.loose_archived = _v2(NAMESPACE, None, 90, state="archived", word="orchard vault")
        self.collected = _v2(NAMESPACE, COLLECTION, 20)
        self.collected_archived = _v2(NAMESPACE, COLLECTION, 21, state="archived")
        self.beta = _v2("beta", None, 30)
        self.legacy = {
            "schema_version": 1,
            "id": f"{MARK}legacy-one",
            "title": f"{MARK}title legacy",
            "content": f"orchard pears {MARK}content legacy",
            "tags": [f"{MARK}tag legacy"],
        }
        self.twin = {
            "schema_version": 1,
            "id": f"{MARK}legacy-twin",
            "content": f"orchard twins {MARK}content twin",
        }
        self.twin_copy = {**self.twin, "content": f"orchard twins {MARK}content twin copy"}
        # Files that must be skipped: their ids must never surface anywhere.
        self.symlinked = _v2(NAMESPACE, None, 40, word="orchard lagoon")
        self.oversized = _v2(NAMESPACE, None, 41, word="orchard glacier")
        self.invalid_id = "mem_" + uuid.uuid4().hex

        for body in [
            *self.loose,
            self.loose_archived,
            self.collected,
            self.collected_archived,
            self.beta,
        ]:
            _write(root, _relative(body), _dump(body))
        _write(root, f"project/{self.legacy['id']}.json", _dump(self.legacy))
        _write(root, f"project/{self.twin['id']}.json", _dump(self.twin))
        _write(root, "project/older/twin-copy.json", _dump(self.twin_copy))
        target = _write(outside, "symlink-target.json", _dump(self.symlinked))
        (root / _relative(self.symlinked)).symlink_to(target)
        padding = b" " * (64 * 1024)
        _write(root, _relative(self.oversized), _dump(self.oversized)[:-1] + padding + b"\n")
        _write(
            root,
            f"project/beta/{self.invalid_id}.json",
            b'{"schema_version": 2, "content": "orchard ' + MARK.encode() + b"invalid",
        )
        (root / "knowledge").mkdir()  # an empty scope directory; agent/ stays missing

    @property
    def skipped_ids(self) -> set[str]:
        return {self.symlinked["id"], self.oversized["id"], self.invalid_id}

    @property
    def archived_ids(self) -> set[str]:
        return {self.loose_archived["id"], self.collected_archived["id"]}

    def listed(self, selector: str) -> list[dict[str, Any]]:
        """The expected list items, in list order: legacy records by id, then canonical
        ones by namespace, collectionless before collected, collection and id."""
        loose = sorted([*self.loose, self.loose_archived], key=lambda b: b["id"])
        collected = sorted([self.collected, self.collected_archived], key=lambda b: b["id"])
        canonical = {
            "scope": [self.beta, *loose, *collected],
            "namespace": [*loose, *collected],
            "collectionless": loose,
            "collection": collected,
        }[selector]
        items = [_item(body) for body in canonical]
        if selector == "scope":
            legacy = [
                {
                    "reference": _reference(self.legacy),
                    "title": self.legacy["title"],
                    "inspectability": "exact",
                },
                {"reference": _reference(self.twin), "title": None, "inspectability": "ambiguous"},
                {"reference": _reference(self.twin), "title": None, "inspectability": "ambiguous"},
            ]
            items = sorted(legacy, key=lambda i: i["reference"]["id"]) + items
        return items


def _item(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "reference": _reference(body),
        "title": body["title"],
        "inspectability": "exact",
        "kind": body["kind"],
        "lifecycle": {"state": body["lifecycle"]["state"]},
    }


SELECTORS: dict[str, dict[str, Any]] = {
    "scope": {"scope": "project"},
    "namespace": {"scope": "project", "namespace_id": NAMESPACE},
    "collectionless": {"scope": "project", "namespace_id": NAMESPACE, "collection_id": None},
    "collection": {"scope": "project", "namespace_id": NAMESPACE, "collection_id": COLLECTION},
}
QUERY = f"orchard apples {MARK}querymark"


def _tree(root: Path) -> dict[str, tuple[int, int, bytes | None]]:
    entries: dict[str, tuple[int, int, bytes | None]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        entries[str(path.relative_to(root))] = (info.st_mode, info.st_mtime_ns, data)
    return entries


async def _read_journey(url: str, seeded: Seeded) -> dict[str, Any]:
    steps: dict[str, Any] = {}
    async with Client(url, mode="legacy") as client:

        async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(tool, arguments)
            payload = dict(result.structured_content or {})
            (block,) = result.content
            assert isinstance(block, TextContent)
            assert json.loads(block.text) == payload
            assert bool(result.is_error) == (payload["status"] in ERROR_STATUSES), payload
            return payload

        steps["recall"] = await call("memory_recall", {"query": QUERY, "scope": "project"})
        steps["recall_namespace"] = await call(
            "memory_recall", {"query": "orchard", "scope": "project", "namespace_id": NAMESPACE}
        )
        steps["recall_twins"] = await call("memory_recall", {"query": "twins", "scope": "project"})
        for word in ("vault", "lagoon", "glacier", f"{MARK}invalid"):
            steps[f"recall_{word}"] = await call(
                "memory_recall", {"query": word, "scope": "project"}
            )
        steps["recall_missing_scope"] = await call(
            "memory_recall", {"query": "orchard", "scope": "agent"}
        )

        for name, selector in SELECTORS.items():
            steps[f"list_{name}"] = await call("memory_list", selector)
            pages = [await call("memory_list", {**selector, "page_size": 3})]
            while pages[-1]["page"]["next_cursor"] is not None:
                cursor = pages[-1]["page"]["next_cursor"]
                pages.append(await call("memory_list", {**selector, "cursor": cursor}))
            steps[f"pages_{name}"] = pages
        first = steps["pages_scope"][0]["page"]["next_cursor"]
        steps["list_cursor_other_selector"] = await call(
            "memory_list", {**SELECTORS["namespace"], "cursor": first}
        )
        steps["list_empty_scope"] = await call("memory_list", {"scope": "knowledge"})
        steps["list_missing_scope"] = await call("memory_list", {"scope": "agent"})

        async def inspect(reference: dict[str, Any]) -> dict[str, Any]:
            return await call("memory_inspect", {"reference": reference})

        steps["inspect_v2"] = await inspect(_reference(seeded.collected))
        steps["inspect_archived"] = await inspect(_reference(seeded.loose_archived))
        steps["inspect_v1"] = await inspect(_reference(seeded.legacy))
        steps["inspect_twin"] = await inspect(_reference(seeded.twin))
        steps["inspect_skipped"] = [
            await inspect(_reference(seeded.symlinked)),
            await inspect(_reference(seeded.oversized)),
            await inspect({**_reference(seeded.beta), "id": seeded.invalid_id}),
            await inspect(
                {
                    "schema_version": 2,
                    "scope": "agent",
                    "namespace_id": "a",
                    "collection_id": None,
                    "id": "mem_" + "0" * 32,
                }
            ),
        ]
    return steps


def test_reads_through_the_real_server_over_a_seeded_root(sandbox: Sandbox) -> None:
    root = sandbox.memory_root
    root.mkdir(parents=True)
    seeded = Seeded(root, sandbox.root / "outside")
    before = _tree(root)
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    with serve(sandbox) as server:
        steps = anyio.run(_read_journey, server.url, seeded)
        log = "".join(server.output)

    # recall: at most five, archived and skipped files excluded, no paths or scores.
    recall = steps["recall"]
    assert recall["status"] == "ok"
    assert len(recall["memories"]) == 5
    for item in recall["memories"]:
        assert set(item) == RECALL_KEYS
        assert set(item["match"]) == {"terms", "tags"}
        assert item["id"] == item["reference"]["id"]
        assert item["id"] not in seeded.archived_ids | seeded.skipped_ids
    text = json.dumps(steps, ensure_ascii=False)
    assert ".json" not in text
    assert str(sandbox.root) not in text
    assert "score" not in json.dumps(recall)
    assert {m["reference"]["namespace_id"] for m in steps["recall_namespace"]["memories"]} == {
        NAMESPACE
    }
    twins = steps["recall_twins"]["memories"]
    assert [m["reference"] for m in twins] == [_reference(seeded.twin)] * 2
    for word in ("vault", "lagoon", "glacier", f"{MARK}invalid"):
        assert steps[f"recall_{word}"] == {"status": "no_matches", "memories": []}, word
    assert steps["recall_missing_scope"] == {"status": "no_matches", "memories": []}

    # list: every selector, exact order and shape, paging that walks the same inventory.
    for name in SELECTORS:
        expected = seeded.listed(name)
        listed = steps[f"list_{name}"]
        assert listed["memories"] == expected, name
        assert listed["page"] == {
            "number": 1,
            "count": len(expected),
            "total_count": len(expected),
            "total_pages": 1,
            "truncated": False,
            "next_cursor": None,
        }
        pages = steps[f"pages_{name}"]
        assert [item for page in pages for item in page["memories"]] == expected, name
        assert [page["page"]["number"] for page in pages] == list(range(1, len(pages) + 1))
        assert len(pages) == -(-len(expected) // 3)
        assert all(page["page"]["total_pages"] == len(pages) for page in pages)
        assert [page["page"]["truncated"] for page in pages] == [True] * (len(pages) - 1) + [False]
    assert len(steps["list_scope"]["memories"]) == 3 + 1 + 8 + 2
    foreign = steps["list_cursor_other_selector"]
    assert (foreign["status"], foreign["code"]) == ("invalid_request", "invalid_cursor")
    for name in ("list_empty_scope", "list_missing_scope"):
        assert steps[name]["memories"] == []
        assert steps[name]["page"]["total_count"] == 0
    listed_ids = {i["reference"]["id"] for i in steps["list_scope"]["memories"]}
    assert not listed_ids & seeded.skipped_ids

    # inspect: complete v2 and v1 records; ambiguity and skipped files are errors.
    collected = seeded.collected
    assert steps["inspect_v2"] == {
        "status": "ok",
        "memory": {"reference": _reference(collected), **collected},
    }
    archived = steps["inspect_archived"]["memory"]
    assert archived["lifecycle"] == {"state": "archived", "revision": 2}
    legacy = seeded.legacy
    assert steps["inspect_v1"] == {
        "status": "ok",
        "memory": {"reference": _reference(legacy), **legacy},
    }
    twin = steps["inspect_twin"]
    assert (twin["status"], twin["code"]) == ("conflict", "ambiguous_reference")
    assert [(s["status"], s["code"]) for s in steps["inspect_skipped"]] == [
        ("not_found", "not_found")
    ] * 4

    # Reads changed nothing and created nothing (no agent/ scope, no lock file).
    assert _tree(root) == before
    assert not (root / "agent").exists()

    # The log: terminal events and bounded skip reasons only.
    assert "event=memory_recall outcome=ok" in log
    assert "event=memory_list outcome=ok" in log
    assert "event=memory_inspect outcome=conflict code=ambiguous_reference" in log
    for reason in ("symlink", "oversized", "invalid_json"):
        assert re.search(f"skipped scope=project file=[0-9a-f]{{12}} reason={reason}", log)
    assert MARK not in log
    assert str(sandbox.root) not in log
    assert "orchard" not in log
    every_id = {i["reference"]["id"] for i in steps["list_scope"]["memories"]}
    for memory_id in every_id | seeded.skipped_ids:
        assert memory_id not in log


async def _missing_root_journey(url: str) -> list[dict[str, Any]]:
    async with Client(url, mode="legacy") as client:
        calls = [
            ("memory_recall", {"query": "orchard", "scope": "project"}),
            ("memory_list", {"scope": "project"}),
            ("memory_list", {"scope": "project", "namespace_id": "alpha", "collection_id": None}),
            ("memory_inspect", {"reference": {"schema_version": 1, "scope": "self", "id": "x"}}),
            (
                "memory_inspect",
                {
                    "reference": {
                        "schema_version": 2,
                        "scope": "project",
                        "namespace_id": "alpha",
                        "collection_id": None,
                        "id": "mem_" + "1" * 32,
                    }
                },
            ),
        ]
        results = []
        for tool, arguments in calls:
            result = await client.call_tool(tool, arguments)
            results.append(dict(result.structured_content or {}))
        return results


def test_reads_never_create_a_missing_root(sandbox: Sandbox) -> None:
    missing = sandbox.root / "absent" / "memory"
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    with serve(sandbox, {"MNEMOSYNE_MEMORY_ROOT": str(missing)}) as server:
        results = anyio.run(_missing_root_journey, server.url)
    assert results[0] == {"status": "no_matches", "memories": []}
    for listed in results[1:3]:
        assert (listed["status"], listed["memories"]) == ("ok", [])
    for inspected in results[3:]:
        assert (inspected["status"], inspected["code"]) == ("not_found", "not_found")
    assert not (sandbox.root / "absent").exists()
    assert not sandbox.memory_root.exists()

"""A published tool definition never changes under the same capability version.

`capability_contract_ledger.json` (beside this file, owned by the tests) records, for each
(tool, capability version), the SHA-256 of the canonical definition plus its top-level
property names and required fields. Entries are history: old ones stay when a version is
bumped. To change a definition: bump the capability version in `manifest.json`, then
append the entry this test prints (never edit or delete an existing entry).

Canonical definition: ``{"name", "title", "description", "inputSchema"}`` serialised with
``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=True)``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from mymcp.host import production_binding
from mymcp.plugin import QualifiedCapabilityId
from mymcp.plugins.mnemosyne import mnemosyne_manifest
from mymcp.plugins.mnemosyne.memory import TOOL_NAMES, tool_definition, tools

LEDGER_PATH = Path(__file__).with_name("capability_contract_ledger.json")
_SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")


def canonical_definition(name: str) -> dict[str, Any]:
    capability = QualifiedCapabilityId("mnemosyne", "tool", name)
    return {"name": production_binding(capability), **tool_definition(name)}


def ledger_entry(name: str, version: str) -> dict[str, Any]:
    definition = canonical_definition(name)
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    schema = definition["inputSchema"]
    return {
        "tool": name,
        "version": version,
        "sha256": hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
        "properties": list(schema.get("properties", {})),
        "required": list(schema.get("required", [])),
    }


def declared_versions() -> dict[str, str]:
    return {c.local_id: c.version for c in mnemosyne_manifest().capabilities}


def load_ledger() -> list[dict[str, Any]]:
    document = json.loads(LEDGER_PATH.read_text(encoding="utf-8"))
    assert document["format"] == 1
    entries = document["entries"]
    assert isinstance(entries, list)
    return entries


def _version_key(version: str) -> tuple[int, ...]:
    match = _SEMVER.fullmatch(version)
    assert match is not None, f"not a plain SemVer version: {version}"
    return tuple(int(part) for part in match.groups())


def test_every_published_definition_matches_its_ledger_entry() -> None:
    entries = {(e["tool"], e["version"]): e for e in load_ledger()}
    versions = declared_versions()
    assert set(versions) == set(TOOL_NAMES)
    for name in TOOL_NAMES:
        current = ledger_entry(name, versions[name])
        recorded = entries.get((name, versions[name]))
        hint = json.dumps(current, indent=2)
        assert recorded is not None, (
            f"{name} {versions[name]} has no ledger entry; if the definition changed, bump "
            f"the capability version and append:\n{hint}"
        )
        assert recorded == current, (
            f"{name} changed without a capability version bump; bump the version in "
            f"manifest.json and append a new entry (keep the old one):\n{hint}"
        )


def test_ledger_history_is_well_formed() -> None:
    entries = load_ledger()
    seen: set[tuple[str, str]] = set()
    latest: dict[str, tuple[int, ...]] = {}
    for entry in entries:
        assert set(entry) == {"tool", "version", "sha256", "properties", "required"}
        assert entry["tool"] in TOOL_NAMES
        assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
        assert set(entry["required"]) <= set(entry["properties"])
        key = (entry["tool"], entry["version"])
        assert key not in seen, f"duplicate ledger entry {key}"
        seen.add(key)
        # History is append-only: a tool's versions only ever grow in file order.
        version = _version_key(entry["version"])
        assert version > latest.get(entry["tool"], (-1,)), f"out-of-order entry {key}"
        latest[entry["tool"]] = version


def test_declared_version_is_the_newest_ledger_version() -> None:
    newest: dict[str, tuple[int, ...]] = {}
    for entry in load_ledger():
        newest[entry["tool"]] = max(
            newest.get(entry["tool"], (-1,)), _version_key(entry["version"])
        )
    for name, version in declared_versions().items():
        assert newest[name] == _version_key(version), f"{name} is behind its ledger history"


def test_a_changed_definition_fails_the_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    # Even a description-only change needs a new capability version.
    changed = dict(tools.TOOLS)
    recall = changed["memory_recall"]
    changed["memory_recall"] = dataclasses.replace(
        recall, description=recall.description + " Now with more words."
    )
    monkeypatch.setattr(tools, "TOOLS", changed)
    with pytest.raises(AssertionError, match="memory_recall changed without a capability"):
        test_every_published_definition_matches_its_ledger_entry()

"""The bundled adapter: packaged manifest, gate selection, parity and handler round trips."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import os
import threading
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
import pytest

from mymcp.config import BUNDLED_PLUGIN_ID
from mymcp.host import production_binding
from mymcp.plugin import (
    ActivatedTool,
    Consent,
    PluginAdapter,
    QualifiedCapabilityId,
    ToolEffects,
    parse_manifest,
    validate_plugin_contract,
)
from mymcp.plugins.mnemosyne import (
    MnemosyneSettings,
    _adapter,
    create_mnemosyne,
    mnemosyne_manifest,
    selected_capabilities,
)
from mymcp.plugins.mnemosyne._settings import GATE_ENVIRONMENT
from mymcp.plugins.mnemosyne.memory import (
    TOOL_GATES,
    TOOL_NAMES,
    MemoryService,
    MutationService,
    ToolOutcome,
    tool_definition,
)
from mymcp.plugins.mnemosyne.memory import store as store_module
from mymcp.runtime._composition import compose_runtime

READS = ("memory_recall", "memory_list", "memory_inspect")
GATES = ("remember", "archive_restore", "revise", "forget")
GATED_TOOLS = {
    "archive_restore": ("memory_archive", "memory_restore"),
    "remember": ("memory_remember",),
    "revise": ("memory_revise",),
    "forget": ("memory_forget",),
}
RO = ToolEffects(read_only=True, destructive=False, idempotent=True, open_world=False)
WRITE = ToolEffects(read_only=False, destructive=False, idempotent=True, open_world=False)
DESTROY = ToolEffects(read_only=False, destructive=True, idempotent=True, open_world=False)
# Contract 4.4, in registry order.
DECLARED = [
    ("memory_recall", "1.3.0", RO, Consent.NONE),
    ("memory_list", "1.3.0", RO, Consent.NONE),
    ("memory_inspect", "1.2.0", RO, Consent.NONE),
    ("memory_archive", "1.2.1", WRITE, Consent.PER_CALL),
    ("memory_restore", "1.2.1", WRITE, Consent.PER_CALL),
    ("memory_remember", "1.3.1", WRITE, Consent.PER_CALL),
    ("memory_revise", "1.3.1", DESTROY, Consent.PER_CALL),
    ("memory_forget", "1.2.1", DESTROY, Consent.PER_CALL),
]

MEM_ID = "mem_0123456789abcdef0123456789abcdef"
OTHER_ID = "mem_fedcba9876543210fedcba9876543210"


def all_gate_settings() -> list[MnemosyneSettings]:
    return [
        MnemosyneSettings(**dict(zip(GATES, values, strict=True)))
        for values in itertools.product((False, True), repeat=len(GATES))
    ]


class StubMutations:
    """Stand-in mutation operations, to test the adapter's wiring without a memory root."""

    lock_timeout = 5.0

    def __init__(self, indexes: MemoryService, candidate_limit: int) -> None:
        assert isinstance(indexes, MemoryService)
        self.candidate_limit = candidate_limit

    def _stub(self, name: str, arguments: Mapping[str, Any], deadline: float) -> ToolOutcome:
        assert deadline > 0  # the bridge hands every mutation its deadline
        return ToolOutcome({"status": name, "echo": dict(arguments)}, is_error=False)

    def archive(self, arguments: Mapping[str, Any], *, deadline: float) -> ToolOutcome:
        return self._stub("archived", arguments, deadline)

    def restore(self, arguments: Mapping[str, Any], *, deadline: float) -> ToolOutcome:
        return self._stub("restored", arguments, deadline)

    def remember(self, arguments: Mapping[str, Any], *, deadline: float) -> ToolOutcome:
        return self._stub("remembered", arguments, deadline)

    def revise(self, arguments: Mapping[str, Any], *, deadline: float) -> ToolOutcome:
        return ToolOutcome({"status": "refused", "code": "disallowed_content"}, is_error=True)

    def forget(self, arguments: Mapping[str, Any], *, deadline: float) -> ToolOutcome:
        return self._stub("forgotten", arguments, deadline)

    def refuse_busy(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        return ToolOutcome({"status": "storage_error", "code": "memory_busy"}, is_error=True)


class PartialMutations(StubMutations):
    """A mutation service that lacks one operation."""

    forget = None  # type: ignore[assignment]


@pytest.fixture
def full_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_adapter, "MutationService", StubMutations)


def handlers_of(adapter: PluginAdapter) -> dict[str, Callable[[dict[str, Any]], Mapping[str, Any]]]:
    """The handlers by local id, each called to completion: reads are synchronous,
    mutations coroutines (run here on their own event loop)."""

    def complete(tool: ActivatedTool) -> Callable[[dict[str, Any]], Mapping[str, Any]]:
        assert tool.is_async is (tool.capability.local_id not in READS)

        def call(arguments: dict[str, Any]) -> Mapping[str, Any]:
            if tool.is_async:
                result = anyio.run(tool.handler, arguments)  # type: ignore[arg-type]
            else:
                result = tool.handler(arguments)
            assert isinstance(result, Mapping)
            return result

        return call

    return {tool.capability.local_id: complete(tool) for tool in adapter.contribution.tools}


def names(adapter: PluginAdapter) -> list[str]:
    return [tool.capability.local_id for tool in adapter.contribution.tools]


# --- manifest ------------------------------------------------------------------------------


def test_packaged_manifest_resource() -> None:
    raw = resources.files("mymcp.plugins.mnemosyne").joinpath("manifest.json").read_bytes()
    document = json.loads(raw)
    assert document["$schema"] == "https://mymcp.local/schemas/plugin-manifest-v1.json"
    assert [c["id"] for c in document["capabilities"]] == list(TOOL_NAMES)
    assert parse_manifest(raw) == mnemosyne_manifest()


def test_each_tool_names_a_real_gate_and_service_method() -> None:
    # The adapter derives its registry from the tool definitions: a tool named
    # memory_<op> is served by <op> on the read service (no gate) or the mutation service.
    assert {gate for gate in TOOL_GATES.values() if gate is not None} == set(GATE_ENVIRONMENT)
    for name, gate in TOOL_GATES.items():
        service = MemoryService if gate is None else MutationService
        assert callable(getattr(service, name.removeprefix("memory_"), None)), name
    assert tuple(name for name, gate in TOOL_GATES.items() if gate is None) == READS


def test_manifest_matches_contract() -> None:
    definition = mnemosyne_manifest()
    assert definition.manifest_version == 1
    assert definition.plugin_id == "mnemosyne"
    assert definition.version == "0.3.0"
    assert (definition.requires.minimum, definition.requires.maximum) == (1, 1)
    assert definition.data_schema_version == 1
    assert [c.value for c in definition.authority.filesystem] == ["data_read", "data_write"]
    assert definition.authority.network is False
    assert definition.secret_references == ()
    assert definition.configuration.schema_version == 1
    assert dict(definition.configuration.schema) == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    assert [
        (c.local_id, c.version, c.effects, c.consent) for c in definition.capabilities
    ] == DECLARED
    assert all(c.kind == "tool" for c in definition.capabilities)


@pytest.mark.parametrize("settings", all_gate_settings(), ids=str)
def test_adapter_definition_and_contribution_pass_parity(settings: MnemosyneSettings) -> None:
    adapter = create_mnemosyne(settings).adapter
    assert adapter.definition == mnemosyne_manifest()
    assert adapter.contribution.plugin_id == "mnemosyne"
    assert adapter.contribution.version == "0.3.0"
    validate_plugin_contract(adapter, mnemosyne_manifest())


# --- gate selection ------------------------------------------------------------------------


def test_no_gates_select_only_reads() -> None:
    assert selected_capabilities(MnemosyneSettings()) == READS
    assert names(create_mnemosyne(MnemosyneSettings()).adapter) == list(READS)


@pytest.mark.parametrize("gate", GATES)
def test_each_gate_alone_selects_only_its_tools(gate: str) -> None:
    settings = MnemosyneSettings(**{gate: True})
    assert selected_capabilities(settings) == READS + GATED_TOOLS[gate]


def test_all_gates_select_everything_in_registry_order() -> None:
    settings = MnemosyneSettings(**dict.fromkeys(GATES, True))
    assert selected_capabilities(settings) == TOOL_NAMES


@pytest.mark.usefixtures("full_service")
@pytest.mark.parametrize("settings", all_gate_settings(), ids=str)
def test_contribution_is_the_gate_selection_when_operations_exist(
    settings: MnemosyneSettings,
) -> None:
    adapter = create_mnemosyne(settings).adapter
    assert tuple(names(adapter)) == selected_capabilities(settings)
    validate_plugin_contract(adapter, mnemosyne_manifest())


@pytest.mark.parametrize("settings", all_gate_settings(), ids=str)
def test_every_selected_mutation_is_served_by_the_real_mutation_service(
    settings: MnemosyneSettings,
) -> None:
    assert names(create_mnemosyne(settings).adapter) == list(selected_capabilities(settings))


def test_mutation_without_a_domain_operation_is_not_contributed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_adapter, "MutationService", PartialMutations)
    adapter = create_mnemosyne(MnemosyneSettings(**dict.fromkeys(GATES, True))).adapter
    assert names(adapter) == [name for name in TOOL_NAMES if name != "memory_forget"]


def test_candidate_limit_reaches_the_mutation_service(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[StubMutations] = []

    class Recording(StubMutations):
        def __init__(self, indexes: MemoryService, candidate_limit: int) -> None:
            super().__init__(indexes, candidate_limit)
            built.append(self)

    monkeypatch.setattr(_adapter, "MutationService", Recording)
    create_mnemosyne(MnemosyneSettings(remember=True, candidate_limit=7))
    assert [m.candidate_limit for m in built] == [7]


@pytest.mark.usefixtures("full_service")
def test_activated_tools_carry_declared_metadata() -> None:
    adapter = create_mnemosyne(MnemosyneSettings(**dict.fromkeys(GATES, True))).adapter
    declared = {c.local_id: c for c in adapter.definition.capabilities}
    for tool in adapter.contribution.tools:
        local_id = tool.capability.local_id
        assert tool.capability == QualifiedCapabilityId("mnemosyne", "tool", local_id)
        assert tool.effects == declared[local_id].effects
        assert tool.consent == declared[local_id].consent
        assert tool.definition() == tool_definition(local_id)
        assert tool.is_async is (local_id not in READS)


@pytest.mark.usefixtures("full_service")
def test_mutation_handlers_bridge_to_the_service() -> None:
    adapter = create_mnemosyne(MnemosyneSettings(**dict.fromkeys(GATES, True))).adapter
    handlers = handlers_of(adapter)
    result = handlers["memory_forget"]({"expected_revision": 2})
    assert result["structuredContent"] == {"status": "forgotten", "echo": {"expected_revision": 2}}
    assert "isError" not in result
    refused = handlers["memory_revise"]({})
    assert refused["isError"] is True
    assert refused["structuredContent"]["code"] == "disallowed_content"


def test_the_bundled_id_is_the_manifest_id_and_its_names_are_pinned() -> None:
    assert mnemosyne_manifest().plugin_id == BUNDLED_PLUGIN_ID
    capability = QualifiedCapabilityId(BUNDLED_PLUGIN_ID, "tool", "memory_list")
    assert production_binding(capability) == "memory_list"
    other = QualifiedCapabilityId("other", "tool", "memory_list")
    assert production_binding(other) == "other__memory_list"


@pytest.mark.usefixtures("full_service")
def test_composes_into_a_runtime_with_pinned_names() -> None:
    adapter = create_mnemosyne(MnemosyneSettings(**dict.fromkeys(GATES, True))).adapter
    runtime = compose_runtime(
        [adapter.contribution],
        [(t.capability, production_binding(t.capability)) for t in adapter.contribution.tools],
        server_version="0.1.0",
    )
    assert [tool.name for tool in runtime.registry] == ["list_tools", *TOOL_NAMES]


def test_settings_type_is_checked() -> None:
    with pytest.raises(TypeError):
        create_mnemosyne({"remember": True})  # type: ignore[arg-type]


# --- handler round trips against a real memory root ----------------------------------------


def write_v2(root: Path, memory_id: str, title: str, content: str) -> None:
    directory = root / "project" / "mnemosyne" / "decisions"
    directory.mkdir(parents=True, exist_ok=True)
    record = f"""{{
  "schema_version": 2,
  "id": "{memory_id}",
  "scope": "project",
  "namespace": {{"kind": "project", "id": "mnemosyne", "label": "Mnemosyne"}},
  "collection": {{"id": "decisions", "label": "Decisions"}},
  "kind": "decision",
  "language": "en",
  "title": "{title}",
  "content": "{content}",
  "tags": ["architecture"],
  "provenance": {{"origin": "explicit_user_statement", "recorded_via": "filesystem"}},
  "lifecycle": {{"state": "active", "revision": 1}},
  "created_at": "2026-01-02T03:04:05Z",
  "updated_at": "2026-01-02T03:04:05Z"
}}
"""
    (directory / f"{memory_id}.json").write_text(record, encoding="utf-8")


def reference(memory_id: str) -> dict[str, Any]:
    return {
        "schema_version": 2,
        "scope": "project",
        "namespace_id": "mnemosyne",
        "collection_id": "decisions",
        "id": memory_id,
    }


def read_handlers(
    environ: Mapping[str, str],
) -> dict[str, Callable[[dict[str, Any]], Mapping[str, Any]]]:
    return handlers_of(create_mnemosyne(MnemosyneSettings(), environ=environ).adapter)


def assert_structured(result: Mapping[str, Any]) -> dict[str, Any]:
    payload = result["structuredContent"]
    (block,) = result["content"]
    assert block["type"] == "text"
    assert block["text"] == json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return dict(payload)


def test_recall_list_inspect_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    write_v2(root, MEM_ID, "Consent boundary", "Durable memory needs approval for each call.")
    handlers = read_handlers({"MNEMOSYNE_MEMORY_ROOT": str(root)})

    recalled = handlers["memory_recall"]({"query": "consent approval", "scope": "project"})
    assert "isError" not in recalled
    payload = assert_structured(recalled)
    assert payload["status"] == "ok"
    (hit,) = payload["memories"]
    assert hit["reference"] == reference(MEM_ID)
    assert hit["content"] == "Durable memory needs approval for each call."

    listed = assert_structured(
        handlers["memory_list"]({"scope": "project", "namespace_id": "mnemosyne"})
    )
    assert listed["status"] == "ok"
    (item,) = listed["memories"]
    assert item["reference"] == reference(MEM_ID)
    assert item["title"] == "Consent boundary"
    assert "content" not in item
    assert listed["page"]["total_count"] == 1

    inspected = assert_structured(handlers["memory_inspect"]({"reference": hit["reference"]}))
    assert inspected["status"] == "ok"
    memory = inspected["memory"]
    assert memory["reference"] == reference(MEM_ID)
    assert memory["kind"] == "decision"
    assert memory["lifecycle"] == {"state": "active", "revision": 1}
    assert memory["collection"] == {"id": "decisions", "label": "Decisions"}


def test_tool_errors_are_flagged(tmp_path: Path) -> None:
    handlers = read_handlers({"MNEMOSYNE_MEMORY_ROOT": str(tmp_path / "memory")})
    result = handlers["memory_recall"]({"query": "x", "scope": "elsewhere"})
    assert result["isError"] is True
    payload = assert_structured(result)
    assert (payload["status"], payload["code"]) == ("invalid_request", "invalid_scope")
    missing = handlers["memory_inspect"]({"reference": reference(MEM_ID)})
    assert missing["isError"] is True
    assert assert_structured(missing)["code"] == "not_found"


def test_root_is_resolved_lazily_per_call(tmp_path: Path) -> None:
    environ = {"MNEMOSYNE_MEMORY_ROOT": str(tmp_path / "first")}
    handlers = read_handlers(environ)
    write_v2(tmp_path / "second", MEM_ID, "Moved root", "Found after the root moved.")
    query = {"query": "moved root", "scope": "project"}
    assert assert_structured(handlers["memory_recall"](query))["status"] == "no_matches"
    environ["MNEMOSYNE_MEMORY_ROOT"] = str(tmp_path / "second")
    assert assert_structured(handlers["memory_recall"](query))["status"] == "ok"
    assert not (tmp_path / "first").exists()


def test_list_cursor_continues_and_is_shared_per_process(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    write_v2(root, MEM_ID, "First", "One.")
    write_v2(root, OTHER_ID, "Second", "Two.")
    environ = {"MNEMOSYNE_MEMORY_ROOT": str(root)}
    first_adapter, second_adapter = read_handlers(environ), read_handlers(environ)
    selector = {"scope": "project", "namespace_id": "mnemosyne"}
    page = assert_structured(first_adapter["memory_list"]({**selector, "page_size": 1}))
    cursor = page["page"]["next_cursor"]
    assert isinstance(cursor, str)
    assert [m["reference"]["id"] for m in page["memories"]] == [MEM_ID]
    # Another adapter in the same process shares the cursor codec.
    rest = assert_structured(second_adapter["memory_list"]({**selector, "cursor": cursor}))
    assert [m["reference"]["id"] for m in rest["memories"]] == [OTHER_ID]
    assert rest["page"]["next_cursor"] is None


def test_candidate_limit_reaches_the_service(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    write_v2(root, MEM_ID, "First", "One.")
    write_v2(root, OTHER_ID, "Second", "Two.")
    adapter = create_mnemosyne(
        MnemosyneSettings(candidate_limit=1), environ={"MNEMOSYNE_MEMORY_ROOT": str(root)}
    ).adapter
    result = handlers_of(adapter)["memory_list"]({"scope": "project"})
    assert result["isError"] is True
    assert assert_structured(result)["code"] == "candidate_limit_exceeded"


# --- mutations queued for a writer thread ------------------------------------------------


def test_a_mutation_still_queued_at_its_deadline_gives_up_without_running() -> None:
    # One writer thread, held by a first call that waits (as for another process's lock);
    # the second call waits for the thread, and its deadline counts from its arrival.
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def operation(arguments: Mapping[str, Any], *, deadline: float) -> ToolOutcome:
        ran.append(arguments["call"])
        started.set()
        release.wait(30)
        return ToolOutcome({"status": "remembered"}, is_error=False)

    def refuse(arguments: Mapping[str, Any]) -> ToolOutcome:
        return ToolOutcome({"status": "storage_error", "code": "memory_busy"}, is_error=True)

    async def scenario() -> list[Mapping[str, Any]]:
        limiter = anyio.CapacityLimiter(1)
        handler = _adapter._queued_bridge(operation, refuse, 0.05, lambda: limiter)
        results: list[Mapping[str, Any]] = []

        async def first() -> None:
            results.append(await handler({"call": "first"}))

        async with anyio.create_task_group() as group:
            group.start_soon(first)
            await anyio.to_thread.run_sync(started.wait, 30)
            # The first call still holds the only thread: the second gives up queued.
            results.append(await handler({"call": "second"}))
            assert not release.is_set()
            release.set()
        return results

    busy, done = anyio.run(scenario)
    assert busy["structuredContent"] == {"status": "storage_error", "code": "memory_busy"}
    assert busy["isError"] is True
    assert done["structuredContent"] == {"status": "remembered"}
    assert ran == ["first"]  # the queued call never ran


def test_a_started_mutation_runs_to_its_end_and_keeps_its_outcome() -> None:
    # Once a worker runs it, a mutation is never cut off: cancelling the call (as its
    # deadline does) waits for the write, and its outcome is the answer.
    started, release = threading.Event(), threading.Event()

    def operation(arguments: Mapping[str, Any], *, deadline: float) -> ToolOutcome:
        started.set()
        release.wait(30)
        return ToolOutcome({"status": "remembered"}, is_error=False)

    def refuse(arguments: Mapping[str, Any]) -> ToolOutcome:
        raise AssertionError("a started call is never refused")

    async def scenario() -> list[Mapping[str, Any]]:
        limiter = anyio.CapacityLimiter(1)
        handler = _adapter._queued_bridge(operation, refuse, 30.0, lambda: limiter)
        results: list[Mapping[str, Any]] = []

        async def call() -> None:
            results.append(await handler({}))

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            await anyio.to_thread.run_sync(started.wait, 30)
            group.cancel_scope.cancel()
            release.set()
        return results

    assert [r["structuredContent"] for r in anyio.run(scenario)] == [{"status": "remembered"}]


@pytest.mark.parametrize("cancel", ["task", "scope"])
def test_a_mutation_withdrawn_while_it_waits_for_the_lock_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cancel: str
) -> None:
    # Over HTTP a withdrawn call's task is cancelled outright; on stdio its cancel scope
    # is. Either way the worker thread, waiting for another process's lock, must give up
    # rather than write what the audit records as cancelled.
    from tests.console.conftest import remember_arguments

    root = tmp_path / "memory"
    root.mkdir(mode=0o700)
    settings = MnemosyneSettings(**dict.fromkeys(GATES, True))
    plugin = create_mnemosyne(settings, environ={"MNEMOSYNE_MEMORY_ROOT": str(root)})
    (remember,) = (
        t for t in plugin.adapter.contribution.tools if t.capability.local_id == ("memory_remember")
    )
    waiting = threading.Event()
    real_sleep = store_module.time.sleep

    def sleep(seconds: float) -> None:  # the lock's poll: the call is now waiting for it
        waiting.set()
        real_sleep(seconds)

    monkeypatch.setattr(store_module.time, "sleep", sleep)
    holder = os.open(root / ".mnemosyne.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another process's write, as the lock sees it
    outcomes: list[Mapping[str, Any]] = []

    async def scenario() -> None:
        async def call() -> None:
            outcomes.append(await remember.handler(remember_arguments("Withdrawn")))

        async with anyio.create_task_group() as group:
            if cancel == "task":
                task = asyncio.get_running_loop().create_task(call())
                await anyio.to_thread.run_sync(waiting.wait, 30)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            else:
                group.start_soon(call)
                await anyio.to_thread.run_sync(waiting.wait, 30)
                group.cancel_scope.cancel()
            # The other process is done while the withdrawn call's thread still waits:
            # its next look at the lock finds it free.
            os.close(holder)

    anyio.run(scenario)
    # A call after it runs on a free lock and, as writers take the lock in turn, only
    # once the withdrawn call's thread has let go of it.
    after = handlers_of(plugin.adapter)["memory_remember"](remember_arguments("Kept"))
    assert after["structuredContent"]["status"] == "remembered"
    titles = [json.loads(path.read_text())["title"] for path in root.rglob("mem_*.json")]
    assert titles == ["Kept"]
    assert all(o["structuredContent"]["code"] == "memory_busy" for o in outcomes)

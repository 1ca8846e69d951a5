"""The trusted in-process adapter of the bundled Mnemosyne plugin, and its index build.

It pairs the definition parsed from the packaged inert manifest with the gate-selected
memory tools. Each tool's handler is a narrow bridge: raw arguments go to the memory
service, its outcome comes back as a structured MCP result. A read is synchronous (the
host runs it on a worker thread); a mutation is a coroutine that runs it on this
plugin's own writer threads, with its wait for the root lock bounded from the moment
the call arrived. The services own validation, storage, error mapping and logging.

A server builds the memory index when it starts, in the background, so the first call
after a start does not pay for reading every file: the server answers meanwhile, a call
that needs the scope being built waits for it, and calls about other scopes are let in
every 256 files.
"""

from __future__ import annotations

import functools
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

import anyio
from anyio import CapacityLimiter, to_thread
from anyio.lowlevel import RunVar

from mymcp.errors import ManifestError, MyMCPError
from mymcp.plugin import (
    ActivatedTool,
    PluginAdapter,
    PluginContribution,
    PluginDefinition,
    QualifiedCapabilityId,
    ToolHandler,
    parse_manifest,
    structured_result,
)
from mymcp.plugins.mnemosyne._settings import (
    MnemosyneSettings,
    index_snapshot_directory,
    memory_root,
)
from mymcp.plugins.mnemosyne.memory import (
    MAX_DIRECTORY_DEPTH,
    RECORD_SUFFIX,
    TOOL_GATES,
    WITHDRAWN,
    CursorCodec,
    ErrorCode,
    MemoryOperationError,
    MemoryService,
    MutationService,
    Scope,
    ToolOutcome,
    file_key,
    tool_definition,
    unsafe_permissions,
)

__all__ = [
    "Mnemosyne",
    "create_mnemosyne",
    "mnemosyne_manifest",
    "process_cursor_codec",
    "selected_capabilities",
]

_log = logging.getLogger("mymcp.mnemosyne.adapter")
_build_log = logging.getLogger("mymcp.mnemosyne.index")

_PACKAGE: Final = "mymcp.plugins.mnemosyne"
_MANIFEST_RESOURCE: Final = "manifest.json"

_codec_lock = threading.Lock()
_codec: CursorCodec | None = None


def process_cursor_codec(
    environ: Mapping[str, str] | None = None, home: Path | None = None
) -> CursorCodec:
    """The one list-cursor codec of this process, created on first use.

    Its key derives from the memory file key in the user's cache directory, which every
    process of the user shares (the file is made at the first cursor, not at startup):
    processes behind one address accept each other's cursors, and a restart keeps them.
    Where no key can be kept there, the key is this process's own.
    """
    global _codec
    with _codec_lock:
        if _codec is None:

            def shared_key() -> bytes:
                try:
                    directory = index_snapshot_directory(environ, home)
                except MyMCPError:
                    directory = None
                return file_key(directory)

            _codec = CursorCodec.shared(shared_key)
        return _codec


def mnemosyne_manifest() -> PluginDefinition:
    """Parse the packaged inert manifest with the public manifest parser.

    Raises `ManifestError` when the resource cannot be read or is invalid.
    """
    try:
        data = resources.files(_PACKAGE).joinpath(_MANIFEST_RESOURCE).read_bytes()
    except OSError:
        raise ManifestError(
            "manifest_resource_invalid", "MyMCP plugin manifest resource is invalid"
        ) from None
    return parse_manifest(data)


def selected_capabilities(settings: MnemosyneSettings) -> tuple[str, ...]:
    """The local ids the gates select, in registry order (reads first, then mutations).

    Each tool names its gate (a `MnemosyneSettings` field; none for the reads).
    """
    return tuple(
        local_id
        for local_id, gate in TOOL_GATES.items()
        if gate is None or getattr(settings, gate) is True
    )


def _operation_name(local_id: str) -> str:
    """The service method serving a tool: ``memory_recall`` is ``recall``."""
    return local_id.removeprefix("memory_")


def _bridge(operation: Callable[[Mapping[str, Any]], ToolOutcome]) -> ToolHandler:
    """A read: the host runs it on one of its worker threads."""

    def handle(arguments: dict[str, Any]) -> dict[str, Any]:
        outcome = operation(arguments)
        return structured_result(outcome.payload, is_error=outcome.is_error)

    return handle


# Mutations wait for the one root lock in turn, so a few threads serve them all; they
# are this plugin's own, never taken from the reads' or the host's.
_WRITER_THREADS: Final = 8
_writer_limiter: RunVar[CapacityLimiter] = RunVar("mymcp_memory_writer_threads")


def _writer_threads() -> CapacityLimiter:
    """This event loop's limiter of mutation worker threads."""
    try:
        return _writer_limiter.get()
    except LookupError:
        limiter = CapacityLimiter(_WRITER_THREADS)
        _writer_limiter.set(limiter)
        return limiter


def _queued_bridge(
    operation: Callable[..., ToolOutcome],
    refuse_busy: Callable[[Mapping[str, Any]], ToolOutcome],
    timeout: float,
    threads: Callable[[], CapacityLimiter] = _writer_threads,
) -> ToolHandler:
    """A mutation: its lock wait is bounded from the request's arrival, not from the
    moment a worker thread picks it up.

    The handler runs on the event loop as the call arrives, so the deadline starts
    there; the operation gets it and waits for the root lock only until then. A call
    still queued for a worker thread at the deadline gives up there with memory_busy,
    without running; one that holds the lock runs to its end (its outcome is kept even
    when the deadline passes meanwhile).

    A call its client withdraws (cancels) while it waits for the lock writes nothing:
    the thread cannot be stopped, but the lock's wait ends there, so that what the audit
    records, `cancelled`, is what happened.
    """

    async def handle(arguments: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        done: list[ToolOutcome] = []

        def run() -> None:
            done.append(operation(arguments, deadline=deadline))

        withdrawn = threading.Event()
        token = WITHDRAWN.set(withdrawn)  # the worker runs in a copy of this context
        try:
            with anyio.move_on_after(timeout):
                await to_thread.run_sync(run, limiter=threads())
        except BaseException:
            withdrawn.set()  # cancelled: the thread may still be waiting for the lock
            raise
        finally:
            WITHDRAWN.reset(token)
        outcome = done[0] if done else refuse_busy(arguments)
        return structured_result(outcome.payload, is_error=outcome.is_error)

    return handle


def create_mnemosyne(
    settings: MnemosyneSettings,
    *,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Mnemosyne:
    """Build the plugin for one process from its startup settings.

    One memory service is created here and shared by every handler; it resolves the
    memory root lazily on each call (from ``environ``/``home``, default the process
    environment), bounds discovery by ``settings.candidate_limit``, keeps its index
    snapshot in the user's cache directory and signs list cursors with the process
    codec. The mutation service writes through that same service's index, so reads see
    writes at once. A mutation tool is contributed only when its gate is on and the
    mutation service provides the operation.
    """
    if not isinstance(settings, MnemosyneSettings):
        raise TypeError("settings must be MnemosyneSettings")
    definition = mnemosyne_manifest()
    service = MemoryService(
        lambda: memory_root(environ, home),
        settings.candidate_limit,
        process_cursor_codec(environ, home),
        snapshot_directory=lambda: index_snapshot_directory(environ, home),
    )
    mutations = MutationService(service, settings.candidate_limit)
    tools: list[ActivatedTool] = []
    for local_id in selected_capabilities(settings):
        # Ungated reads are `MemoryService` methods, gated mutations `MutationService` ones.
        provider = service if TOOL_GATES[local_id] is None else mutations
        operation = getattr(provider, _operation_name(local_id), None)
        if not callable(operation):
            _log.warning("mnemosyne_adapter outcome=capability_unavailable capability=%s", local_id)
            continue
        declaration = definition.capability("tool", local_id)
        if declaration is None:  # the packaged manifest declares all eight
            raise ManifestError("undeclared_capability", detail=f"{local_id} is not declared")
        tools.append(
            ActivatedTool(
                capability=QualifiedCapabilityId(definition.plugin_id, "tool", local_id),
                tool=tool_definition(local_id),
                handler=(
                    _bridge(operation)
                    if provider is service
                    else _queued_bridge(
                        operation,
                        functools.partial(mutations.refuse_busy, local_id),
                        mutations.lock_timeout,
                    )
                ),
                effects=declaration.effects,
                consent=declaration.consent,
            )
        )
    contribution = PluginContribution(definition.plugin_id, definition.version, tuple(tools))
    return Mnemosyne(PluginAdapter(definition, contribution), service, mutations, settings)


# Progress is due at least every 2 s; it is looked at every 256 files (a few tens of
# milliseconds), so a report once 1.8 s have passed is never late.
_PROGRESS_SECONDS: Final = 1.8


class _BuildStopped(Exception):
    """Raised from the progress hook to end a walk when the server stops."""


@dataclass
class Mnemosyne:
    """The bundled plugin of one process: its adapter, the services behind the tools
    and the background build of the memory index a server starts with."""

    adapter: PluginAdapter
    service: MemoryService
    mutations: MutationService
    settings: MnemosyneSettings
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start_index_build(self) -> None:
        """Build the index of every scope on a background thread (a server's startup)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._build_in_background, name="mymcp-memory-index", daemon=True
        )
        self._thread.start()

    def _build_in_background(self) -> None:
        # A thread's uncaught exception is printed as a traceback, which is no log line;
        # the calls still read the memory without the build (each makes its scope current).
        try:
            self.build_index()
        except Exception as exc:
            _build_log.error("index_build outcome=error error=%s", type(exc).__name__)

    def stop_index_build(self) -> None:
        """Ask a running build to end at its next progress report (a server's shutdown)."""
        self._stop.set()

    def close(self) -> None:
        """A stopping server's last word to the memory: every index saves what it knows,
        with the changes other processes made applied first (see `MemoryIndex.settle`)."""
        self.service.close()

    def build_index(self, clock: Callable[[], float] = time.monotonic) -> None:
        """Make every scope of the memory root current, logging progress at least every
        two seconds while it takes long, then a summary; broken files are logged once."""
        started = clock()
        try:
            index = self.service.current_index()
        except MemoryOperationError:
            _build_log.warning("index_build outcome=memory_source_unavailable")
            return
        try:
            if unsafe_permissions(os.stat(index.root)):
                # Served all the same (refusing it would lose the user their memory for a
                # mode bit); `mymcp check` fails on it, and says why.
                _build_log.warning(
                    "memory_root outcome=unsafe_permissions hint=run_mymcp_memory_check"
                )
        except OSError:
            pass  # no root yet: the first remember creates it, private
        # Every scope is walked even when no record is there: the walks also remove the
        # temp files of writes a killed process left, the first remember's included.
        total = _count_candidates(index.root)
        done = 0
        last = [started]

        def progress(examined: int) -> None:
            if self._stop.is_set():
                raise _BuildStopped
            now = clock()
            if now - last[0] >= _PROGRESS_SECONDS:
                last[0] = now
                _build_log.info("index_build indexed=%d/%d", done + examined, total)

        skipped = 0
        for scope in Scope:
            try:
                selection = index.refresh(
                    scope,
                    recursive=True,
                    candidate_limit=self.settings.candidate_limit,
                    progress=progress,
                )
            except _BuildStopped:
                _build_log.info("index_build outcome=stopped indexed=%d/%d", done, total)
                return
            except MemoryOperationError as exc:
                over = exc.code is ErrorCode.CANDIDATE_LIMIT_EXCEEDED
                _build_log.warning(
                    "index_build scope=%s outcome=%s%s",
                    scope,
                    exc.code,
                    " setting=candidate_limit" if over else "",
                )
                continue
            done += selection.candidates
            skipped += index.report_skipped(scope)
        _build_log.info(
            "index_build outcome=done records=%d skipped=%d seconds=%.1f",
            done,
            skipped,
            clock() - started,
        )


def _count_candidates(root: Path) -> int:
    """Record-looking names under the root, counted cheaply (names, and the entry types
    the listing gives), so progress can say how far along a build is.

    Walked as the index walks: no link is followed, a scope that is one included (it
    could lead anywhere, the whole filesystem among it), and nothing deeper than the
    index reads is listed; and without recursion, which a deep tree would exhaust."""
    total = 0
    pending: list[tuple[str, int]] = []
    for scope in Scope:
        top = os.path.join(root, scope.value)
        try:
            if stat.S_ISDIR(os.lstat(top).st_mode):
                pending.append((top, 0))
        except OSError:
            continue
    while pending:
        directory, depth = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    name = entry.name
                    if name.endswith(RECORD_SUFFIX):
                        total += 1
                    elif (
                        depth < MAX_DIRECTORY_DEPTH
                        and not name.startswith(".")
                        and entry.is_dir(follow_symlinks=False)
                    ):
                        pending.append((entry.path, depth + 1))
        except OSError:
            continue  # the build itself names what it cannot read
    return total

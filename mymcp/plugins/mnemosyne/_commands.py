"""`mymcp memory …`: see, search, check, export and import memory from the terminal.

These commands run on the operator's own terminal against the memory root the server
uses, through the same index, recall and remember code as the tools. Unlike the tools
they show paths: the person reading them owns the files. They never change a file
except `memory import --apply`, which writes through `memory_remember`'s own checks
and never overwrites.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Final, TextIO

from mymcp.errors import MyMCPError, shown
from mymcp.plugins.mnemosyne._memory_check import (
    PROBLEM_TEXT,
    check_root,
    is_unsafe_mode,
    run_memory_check,
)
from mymcp.plugins.mnemosyne._settings import (
    MnemosyneSettings,
    index_snapshot_directory,
    load_mnemosyne_settings,
    memory_root,
)
from mymcp.plugins.mnemosyne.memory import (
    CANDIDATE_LIMIT_MAX,
    MAX_RECORD_BYTES,
    CursorCodec,
    ErrorCode,
    MemoryOperationError,
    MemoryRecordV2,
    MemoryService,
    MutationService,
    RecordRejected,
    Scope,
    V2Reference,
    file_id,
    is_identifier,
    location_agrees,
    parse_record,
    parse_reference,
    reference_parts,
)

__all__ = ["run_memory_command"]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
_SCOPES: Final = tuple(scope.value for scope in Scope)
_PAGE: Final = 500
_IDENTIFIER_RULE: Final = (
    "1-64 characters of a-z, 0-9, '-' or '_', starting and ending with a letter or digit"
)


class _Memory:
    """The settings, root and services one command works with."""

    def __init__(self, settings: MnemosyneSettings) -> None:
        self.settings = settings
        self.root = Path(os.path.abspath(memory_root()))
        self.service = MemoryService(
            lambda: self.root,
            settings.candidate_limit,
            CursorCodec.generate(),
            snapshot_directory=index_snapshot_directory,
        )


def _usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line before anything is read, or None. Names and
    collections are checked like the tools check them, so that no option can point a
    walk outside the memory root (`--namespace /etc`, `--collection ../..`)."""
    scope = getattr(args, "scope", None)
    if scope is not None and scope not in _SCOPES:
        return f"SCOPE must be one of: {', '.join(_SCOPES)}"
    for option in ("namespace", "collection"):
        value = getattr(args, option, None)
        if value is not None and not is_identifier(value):
            return f"--{option} takes an id of {_IDENTIFIER_RULE}; got {shown(value)}"
    return None


def run_memory_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run one `mymcp memory` subcommand; prints errors with the whole diagnostic."""
    problem = _usage_error(args)
    if problem is not None:
        print(f"mymcp: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = load_mnemosyne_settings()
        command = args.memory_command
        if command == "check":
            return run_memory_check(settings, out)
        memory = _Memory(settings)
        if command == "list":
            return _list(memory, args, out)
        if command == "show":
            return _show(memory, args.target, out)
        if command == "search":
            return _search(memory, args, out)
        if command == "stats":
            return _stats(memory, args.json, out)
        if command == "export":
            return _export(memory, Scope(args.scope), out)
        return _import(memory, args.file, args.apply, out)
    except MyMCPError as exc:
        return _error(str(exc))
    except MemoryOperationError as exc:
        return _error(_operation_failure(exc))


def _operation_failure(exc: MemoryOperationError) -> str:
    """The tool's message, and for an unusable root the root and what is wrong with it:
    the tools may not name paths, this terminal must."""
    text = f"{exc.message} (code={exc.code.value})"
    if exc.code is not ErrorCode.MEMORY_SOURCE_UNAVAILABLE:
        return text
    checked = check_root()
    faults = [finding for finding in checked.findings if finding.severity == "error"]
    return faults[0].render() if faults else f"{checked.root}: {text}"


def _error(text: str) -> int:
    print(f"mymcp: error: {text}", file=sys.stderr)
    return EXIT_FAILURE


def _display(parts: Sequence[str]) -> str:
    return "/".join(parts)


# -- list, show, search -------------------------------------------------------------------


def _list(memory: _Memory, args: argparse.Namespace, out: TextIO) -> int:
    scope = Scope(args.scope)
    if (args.collection or args.no_collection) and args.namespace is None:
        print("mymcp: error: --collection and --no-collection need --namespace", file=sys.stderr)
        return EXIT_USAGE
    container: tuple[str, ...] = ()
    if args.namespace is not None:
        container = (args.namespace,)
        if args.collection is not None:
            container += (args.collection,)
    index = memory.service.current_index()
    recursive = args.namespace is None or not (args.collection or args.no_collection)
    selection = index.refresh(
        scope, container, recursive=recursive, candidate_limit=memory.settings.candidate_limit
    )
    inventory = index.inventory(selection, include_legacy=args.namespace is None)
    for offset in range(0, inventory.count, _PAGE):
        for row in inventory.page(offset, _PAGE):
            state = "archived" if row.archived else ("legacy" if row.legacy_id else "active")
            if args.json:
                item = {
                    "path": _display(row.parts),
                    "id": row.id,
                    "state": state,
                    "kind": row.kind,
                    "title": row.title,
                }
                print(json.dumps(item, ensure_ascii=False), file=out)
            else:
                title = row.title if row.title is not None else "(no title)"
                print(f"{_display(row.parts)}  {state}  {row.kind or '-'}  {title}", file=out)
    if not args.json:
        print(f"{inventory.count} memories", file=sys.stderr)
    return EXIT_OK


def _show(memory: _Memory, target: str, out: TextIO) -> int:
    if target.lstrip().startswith("{"):
        try:
            reference = parse_reference(json.loads(target))
        except ValueError:
            reference = None
        if reference is None:
            return _error("not a memory reference: copy one exactly as a tool returned it")
        answer = memory.service.inspect({"reference": reference.to_json()}).payload
        print(json.dumps(answer, indent=2, ensure_ascii=False), file=out)
        return EXIT_OK if answer.get("status") == "ok" else EXIT_FAILURE
    path = Path(target)
    if not path.is_absolute() and not path.exists():
        path = memory.root / target  # a path under the root, as `memory list` prints it
    try:
        parts = Path(os.path.abspath(path)).relative_to(memory.root).parts
    except ValueError:
        return _error(f"{path} is not under the memory root {memory.root}")
    record, problem = _read_file(path, parts)
    if problem is not None:
        text = PROBLEM_TEXT.get(problem, problem)
        return _error(f"{path}: {text} (reason={problem}, file={file_id(parts)})")
    assert record is not None
    print(json.dumps(record.public_json(), indent=2, ensure_ascii=False), file=out)
    return EXIT_OK


def _read_file(path: Path, parts: Sequence[str]) -> tuple[Any, str | None]:
    """The record in one file, or the reason the server would skip it."""
    try:
        info = os.lstat(path)
    except OSError:
        return None, "unreadable"
    if stat.S_ISLNK(info.st_mode):
        return None, "symlink"
    if not stat.S_ISREG(info.st_mode):
        return None, "unreadable"
    if is_unsafe_mode(info.st_mode):
        return None, "unsafe_permissions"
    if info.st_size > MAX_RECORD_BYTES:
        return None, "oversized"
    try:
        with open(path, "rb", opener=_no_follow) as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    except OSError:
        return None, "unreadable"
    try:
        record = parse_record(data)
    except RecordRejected as exc:
        return None, exc.reason.value
    if not location_agrees(tuple(parts), record):
        return None, "path_mismatch"
    return record, None


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


def _search(memory: _Memory, args: argparse.Namespace, out: TextIO) -> int:
    arguments: dict[str, Any] = {"query": args.query, "scope": args.scope}
    if args.namespace is not None:
        arguments["namespace_id"] = args.namespace
    if args.tags:
        arguments["tags"] = list(args.tags)
    outcome = memory.service.recall(arguments)
    answer = outcome.payload
    if args.json or outcome.is_error:
        print(json.dumps(answer, indent=2, ensure_ascii=False), file=out)
        return EXIT_FAILURE if outcome.is_error else EXIT_OK
    for found in answer["memories"]:
        reference = parse_reference(found["reference"])
        where = (
            _display(reference_parts(reference))
            if isinstance(reference, V2Reference)
            else f"{args.scope} (legacy id {found['id']})"
        )
        matched = ", ".join(found.get("match", {}).get("terms", [])) or "-"
        print(f"{where}\n  {found.get('title') or '(no title)'}  [matched: {matched}]", file=out)
    print(f"{len(answer['memories'])} found ({answer['status']})", file=sys.stderr)
    return EXIT_OK


# -- stats and check ---------------------------------------------------------------------


def _stats(memory: _Memory, as_json: bool, out: TextIO) -> int:
    index = memory.service.current_index()
    report: dict[str, Any] = {"root": str(memory.root), "scopes": {}}
    for scope in Scope:
        index.refresh(scope, recursive=True, candidate_limit=CANDIDATE_LIMIT_MAX)
        tallies = {
            name: tally
            for name, tally in index.tally(scope).items()
            if tally.active or tally.archived or tally.legacy or tally.skipped
        }
        if tallies:
            report["scopes"][scope.value] = {
                name or "-": {
                    "active": tally.active,
                    "archived": tally.archived,
                    "legacy": tally.legacy,
                    "skipped": tally.skipped,
                    "bytes": tally.bytes,
                }
                for name, tally in tallies.items()
            }
    if as_json:
        print(json.dumps(report, indent=2), file=out)
        return EXIT_OK
    print(f"memory root: {memory.root}", file=out)
    columns = ("active", "archived", "legacy", "skipped", "bytes")
    print(_row("scope / namespace", columns), file=out)
    totals = [0] * len(columns)
    for scope, namespaces in report["scopes"].items():
        for name, counts in namespaces.items():
            values = [counts[key] for key in columns]
            totals = [a + b for a, b in zip(totals, values, strict=True)]
            print(_row(f"{scope} / {name}", values), file=out)
    print(_row("total", totals), file=out)
    return EXIT_OK


def _row(label: str, cells: Sequence[object]) -> str:
    return f"{label:<40}" + "".join(f" {cell!s:>9}" for cell in cells)


# -- export and import --------------------------------------------------------------------


def _export(memory: _Memory, scope: Scope, out: TextIO) -> int:
    """Every canonical record of a scope (active and archived) as one JSON line each."""
    index = memory.service.current_index()
    selection = index.refresh(
        scope, recursive=True, candidate_limit=memory.settings.candidate_limit
    )
    inventory = index.inventory(selection, include_legacy=True)
    written, legacy = 0, 0
    for offset in range(0, inventory.count, _PAGE):
        for row in inventory.page(offset, _PAGE):
            if row.legacy_id is not None:
                legacy += 1
                continue
            found = index.lookup(row.parts, scope)
            if found is None or not isinstance(found.record, MemoryRecordV2):
                continue  # changed away meanwhile
            print(json.dumps(found.record.to_json(), ensure_ascii=False), file=out)
            written += 1
    note = (
        f"; {legacy} legacy records left out (no namespace to import them into)" if legacy else ""
    )
    print(f"exported {written} records{note}", file=sys.stderr)
    return EXIT_OK


_REMEMBERED: Final = (
    "scope",
    "namespace",
    "collection",
    "kind",
    "language",
    "title",
    "content",
    "tags",
)


_LINE_BYTES: Final = MAX_RECORD_BYTES + 1
"""The longest line read: one record, as large as a record file may be, and its newline."""


def _lines(handle: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """Numbered lines of at most `_LINE_BYTES`; a longer line is read past, as None."""
    number = 0
    while line := handle.readline(_LINE_BYTES + 1):
        number += 1
        if len(line) <= _LINE_BYTES:
            yield number, line
            continue
        while line and not line.endswith(b"\n"):
            line = handle.readline(_LINE_BYTES + 1)
        yield number, None


def _import(memory: _Memory, file: Path, apply: bool, out: TextIO) -> int:
    """Remember each record of a JSON-lines file (as `memory export` writes them), with
    `memory_remember`'s checks; a dry run unless ``apply``. Archived records are left
    out, an identical memory is reported and kept, and nothing is ever overwritten."""
    mutations = MutationService(memory.service, memory.settings.candidate_limit)
    counts = {"new": 0, "existing": 0, "skipped": 0, "invalid": 0}
    try:
        handle = open(file, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        return _error(f"{file}: {exc.strerror}")
    with handle:
        for number, data in _lines(handle):
            text, verdict = _decoded(data)
            if text is not None:
                if not text.strip():
                    continue
                verdict = _import_line(mutations, text, apply)
            counts[verdict[0]] += 1
            print(f"{file}:{number}: {verdict[1]}", file=out)
    action = "remembered" if apply else "would remember"
    print(
        f"{action} {counts['new']}, already present {counts['existing']}, "
        f"left out {counts['skipped']}, invalid {counts['invalid']}"
        + ("" if apply else " (dry run: add --apply to write)"),
        file=out,
    )
    return EXIT_FAILURE if counts["invalid"] else EXIT_OK


def _decoded(data: bytes | None) -> tuple[str | None, tuple[str, str]]:
    """A line's text, or the verdict on a line that cannot hold a record at all."""
    if data is None:
        return None, ("invalid", f"longer than {_LINE_BYTES} bytes, the most one record takes")
    try:
        return data.decode("utf-8"), ("invalid", "")
    except UnicodeDecodeError as exc:
        where = f"byte 0x{data[exc.start]:02x} at column {exc.start + 1}"
        return None, ("invalid", f"not UTF-8 ({where})")


def _import_line(mutations: MutationService, line: str, apply: bool) -> tuple[str, str]:
    try:
        document = json.loads(line)
    except json.JSONDecodeError as exc:
        return "invalid", f"not JSON ({exc.msg})"
    if not isinstance(document, dict):
        return "invalid", "not a JSON object"
    lifecycle = document.get("lifecycle")
    if isinstance(lifecycle, dict) and lifecycle.get("state") == "archived":
        return "skipped", "archived: left out (import brings in active memories only)"
    provenance = document.get("provenance")
    arguments = {key: document.get(key) for key in _REMEMBERED}
    arguments["origin"] = provenance.get("origin") if isinstance(provenance, dict) else None
    if document.get("occurred_at") is not None:
        arguments["occurred_at"] = document["occurred_at"]
    if isinstance(arguments["namespace"], dict):
        arguments["namespace"] = dict(arguments["namespace"])
    outcome = mutations.remember(arguments, dry_run=not apply)
    answer = outcome.payload
    if outcome.is_error:
        field = f" ({answer['field']})" if "field" in answer else ""
        return "invalid", f"{answer['code']}{field}: {answer['message']}"
    reference = parse_reference(answer["reference"])
    where = _display(reference_parts(reference)) if isinstance(reference, V2Reference) else "?"
    status = answer["status"]
    if status in ("already_exists", "existing_archived"):
        return "existing", f"{status}: {where}"
    if status == "would_remember" and isinstance(reference, V2Reference):
        # The id is drawn when the record is written; a dry run's would be a different one.
        where = _display((*reference_parts(reference)[:-1], "<new id>.json"))
    return "new", f"{status}: {where}"

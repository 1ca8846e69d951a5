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
import logging
import os
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from mymcp.errors import Diagnostic, Location, MyMCPError
from mymcp.plugins.mnemosyne._settings import (
    MnemosyneSettings,
    index_snapshot_directory,
    load_mnemosyne_settings,
    memory_root,
)
from mymcp.plugins.mnemosyne.memory import (
    CANDIDATE_LIMIT_MAX,
    MAX_RECORD_BYTES,
    RECORD_SUFFIX,
    CursorCodec,
    MemoryIndex,
    MemoryOperationError,
    MemoryRecordV2,
    MemoryService,
    MutationService,
    Problem,
    RecordRejected,
    Scope,
    V2Reference,
    file_id,
    location_agrees,
    parse_record,
    parse_reference,
    reference_parts,
)

__all__ = ["check_memory", "memory_problems", "run_memory_command"]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
_SCOPES: Final = tuple(scope.value for scope in Scope)
_PAGE: Final = 500

_PROBLEM_TEXT: Final[Mapping[str, str]] = {
    "symlink": "a symbolic link; links are never followed",
    "too_deep": "nested deeper than four directories below its scope",
    "unreadable": "cannot be read (or is not a regular file)",
    "oversized": f"larger than {MAX_RECORD_BYTES} bytes",
    "invalid_encoding": "not UTF-8",
    "invalid_json": "not valid JSON (or repeats a key)",
    "invalid_record": "valid JSON, but not a memory record (wrong or missing fields)",
    "path_mismatch": "a canonical record in the wrong place for its scope, namespace, "
    "collection or id",
    "duplicate_id": "a legacy record whose id another file in the scope also has",
    "unsafe_permissions": "writable by group or others",
}


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


def run_memory_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run one `mymcp memory` subcommand; prints errors with the whole diagnostic."""
    scope = getattr(args, "scope", None)
    if scope is not None and scope not in _SCOPES:
        print(f"mymcp: error: SCOPE must be one of: {', '.join(_SCOPES)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        memory = _Memory(load_mnemosyne_settings())
        command = args.memory_command
        if command == "list":
            return _list(memory, args, out)
        if command == "show":
            return _show(memory, args.target, out)
        if command == "search":
            return _search(memory, args, out)
        if command == "stats":
            return _stats(memory, args.json, out)
        if command == "check":
            return _check(memory, out)
        if command == "export":
            return _export(memory, Scope(args.scope), out)
        return _import(memory, args.file, args.apply, out)
    except MyMCPError as exc:
        return _error(str(exc))
    except MemoryOperationError as exc:
        return _error(f"{exc.message} (code={exc.code.value})")


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
        return _error(f"{path}: {_PROBLEM_TEXT[problem]} (reason={problem}, file={file_id(parts)})")
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


def memory_problems(root: Path) -> tuple[list[Problem], dict[Scope, int]]:
    """Every file the server would pass over under ``root`` and every file or directory
    writable by others, with the number of candidate files per scope. Reads every file
    once, in a fresh index: nothing is cached, changed or created (and nothing logged).
    """
    index = MemoryIndex(root, watch=False)
    problems: list[Problem] = []
    sizes: dict[Scope, int] = {}
    # The report names every file; the store's own warnings would only repeat it.
    store_log = logging.getLogger("mymcp.memory.store")
    level = store_log.level
    store_log.setLevel(logging.ERROR)
    try:
        for scope in Scope:
            selection = index.refresh(scope, recursive=True, candidate_limit=CANDIDATE_LIMIT_MAX)
            sizes[scope] = selection.candidates
            problems.extend(index.problems(scope))
    finally:
        store_log.setLevel(level)
        index.close()
    problems.extend(_loose_permissions(root))
    return sorted(problems, key=lambda problem: problem.parts), sizes


def _loose_permissions(root: Path) -> Iterator[Problem]:
    if os.name != "posix" or not root.is_dir():
        return
    for directory, directories, files in os.walk(root):
        here = Path(directory)
        for name in (*directories, *files):
            try:
                info = os.lstat(here / name)
            except OSError:
                continue
            watched = stat.S_ISDIR(info.st_mode) or name.endswith(RECORD_SUFFIX)
            if watched and not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022:
                yield Problem((here / name).relative_to(root).parts, "unsafe_permissions")


def check_memory(settings: MnemosyneSettings) -> tuple[list[str], list[Diagnostic]]:
    """`mymcp check`'s view of the memory: summary lines, and findings (errors: a root
    that is relative, unsafe or cannot be created, a scope over the candidate limit;
    a warning: files the server skips, which `mymcp memory check` names)."""
    findings: list[Diagnostic] = []
    configured = memory_root()
    root = Path(os.path.abspath(configured))
    where = Location(source=str(root))
    if not configured.is_absolute():
        findings.append(
            Diagnostic(
                "memory_root_relative",
                "Mnemosyne memory root is not an absolute path",
                Location(source="$MNEMOSYNE_MEMORY_ROOT"),
                f"{str(configured)!r} depends on the directory the server starts in",
            )
        )
    if not root.exists():
        parent = next((p for p in root.parents if p.exists()), None)
        if parent is None or not os.access(parent, os.W_OK | os.X_OK):
            findings.append(
                Diagnostic(
                    "memory_root_unavailable",
                    "Mnemosyne memory root cannot be created",
                    where,
                    f"{parent} is not writable" if parent else "no existing parent directory",
                )
            )
        return [f"memory: {root} (absent; created by the first remember)"], findings
    if not root.is_dir():
        findings.append(
            Diagnostic("memory_root_unavailable", "Mnemosyne memory root is not a directory", where)
        )
        return [f"memory: {root}"], findings
    mode = stat.S_IMODE(os.stat(root).st_mode)
    if os.name == "posix" and mode & 0o022:
        findings.append(
            Diagnostic(
                "memory_root_unsafe_permissions",
                "Mnemosyne memory root is writable by others",
                where,
                f"mode {mode:04o}; run: chmod go-w {root}",
            )
        )
    problems, sizes = memory_problems(root)
    largest = max(sizes, key=lambda scope: sizes[scope])
    limit = settings.candidate_limit
    lines = [
        f"memory: {root} ({sum(sizes.values())} files; largest scope {largest} holds "
        f"{sizes[largest]} of the candidate limit {limit})"
    ]
    for scope, size in sizes.items():
        if size > limit:
            findings.append(
                Diagnostic(
                    "candidate_limit_exceeded",
                    "Mnemosyne scope holds more files than the candidate limit",
                    Location(source=str(root / scope.value)),
                    f"{size} files, limit {limit}: reads of the scope fail; raise [memory] "
                    "candidate_limit in ~/.mnemosyne/config.toml or "
                    "MNEMOSYNE_MEMORY_CANDIDATE_LIMIT",
                )
            )
    if problems:
        findings.append(
            Diagnostic(
                "memory_files_skipped",
                "Mnemosyne skips files under the memory root",
                where,
                f"{len(problems)} file(s); `mymcp memory check` names each and why",
                severity="warning",
            )
        )
    return lines, findings


def _check(memory: _Memory, out: TextIO) -> int:
    root = memory.root
    if not root.exists():
        print(f"memory root: {root} (absent; created by the first remember)", file=out)
        return EXIT_OK
    problems, sizes = memory_problems(root)
    largest = max(sizes, key=lambda scope: sizes[scope])
    print(f"memory root: {root}", file=out)
    print(
        f"records: {sum(sizes.values())} candidate files; largest scope {largest} holds "
        f"{sizes[largest]} (candidate limit {memory.settings.candidate_limit})",
        file=out,
    )
    for problem in problems:
        path = root.joinpath(*problem.parts)
        print(
            f"{path}: {_PROBLEM_TEXT[problem.reason]} "
            f"(reason={problem.reason}, file={file_id(problem.parts)})",
            file=out,
        )
    over = [scope for scope, size in sizes.items() if size > memory.settings.candidate_limit]
    for scope in over:
        print(
            f"scope {scope} holds {sizes[scope]} candidate files, more than the candidate limit "
            f"{memory.settings.candidate_limit}: its reads fail until you raise [memory] "
            "candidate_limit in ~/.mnemosyne/config.toml or MNEMOSYNE_MEMORY_CANDIDATE_LIMIT",
            file=out,
        )
    if problems or over:
        print(f"memory check: {len(problems) + len(over)} problem(s)", file=out)
        return EXIT_FAILURE
    print("memory check: OK", file=out)
    return EXIT_OK


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


def _import(memory: _Memory, file: Path, apply: bool, out: TextIO) -> int:
    """Remember each record of a JSON-lines file (as `memory export` writes them), with
    `memory_remember`'s checks; a dry run unless ``apply``. Archived records are left
    out, an identical memory is reported and kept, and nothing is ever overwritten."""
    mutations = MutationService(memory.service, memory.settings.candidate_limit)
    counts = {"new": 0, "existing": 0, "skipped": 0, "invalid": 0}
    try:
        handle = open(file, encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        return _error(f"{file}: {exc.strerror}")
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            verdict = _import_line(mutations, line, apply)
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
    return "new", f"{status}: {where}"

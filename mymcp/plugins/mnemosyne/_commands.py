"""`mymcp memory …`: see, search, check, export and import memory from the terminal.

These commands run on the operator's own terminal against the memory root the server
uses, through the same index, recall and remember code as the tools. Unlike the tools
they show paths: the person reading them owns the files. They never change a file
except `memory import --apply`, which writes through `memory_remember`'s own checks
and never overwrites.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Final, TextIO

from mymcp._escaping import escape_invisible, json_for_terminal
from mymcp._strictjson import (
    DEFAULT_MAX_DEPTH,
    StrictJsonError,
    StrictJsonReason,
    load_strict_json,
)
from mymcp.errors import MyMCPError, shown
from mymcp.plugins.mnemosyne._memory_check import (
    PROBLEM_TEXT,
    check_root,
    container_fault,
    logged_file_key,
    run_memory_check,
    scope_fault,
)
from mymcp.plugins.mnemosyne._settings import (
    MnemosyneSettings,
    index_snapshot_directory,
    load_mnemosyne_settings,
    memory_root,
)
from mymcp.plugins.mnemosyne.memory import (
    CANDIDATE_LIMIT_MAX,
    LIFECYCLE_STATES,
    MAX_DIRECTORY_DEPTH,
    MAX_RECORD_BYTES,
    ORIGINS,
    RECORD_SUFFIX,
    CursorCodec,
    ErrorCode,
    MemoryIndex,
    MemoryOperationError,
    MemoryRecordV2,
    MemoryService,
    MutationService,
    RecordRejected,
    Scope,
    V2Reference,
    candidate_limit_exceeded,
    file_id,
    is_identifier,
    location_agrees,
    parse_record,
    parse_reference,
    reference_parts,
    unsafe_permissions,
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
_ECHOED: Final = 200
"""The most characters of an argument an error repeats: more than any path below the
root that names a canonical record (at most 184), so a path `list` printed is shown
whole, while an argument of any length still gives one short line."""


class _Memory:
    """The settings, root and services one command works with."""

    def __init__(self, settings: MnemosyneSettings, *, writes: bool = False) -> None:
        self.settings = settings
        self.root = Path(os.path.abspath(memory_root()))
        # Only a command that writes cleans up after interrupted writes: reading the
        # root changes nothing in it.
        self.service = MemoryService(
            lambda: self.root,
            settings.candidate_limit,
            CursorCodec.generate(),
            snapshot_directory=index_snapshot_directory,
            sweep_temps=writes,
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


def run_memory_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one `mymcp memory` subcommand; prints errors with the whole diagnostic."""
    # Looked up on each call, not bound once at import: whoever runs the command in
    # process (a test capturing output) may have replaced sys.stdout since.
    out = sys.stdout if out is None else out
    problem = _usage_error(args)
    if problem is not None:
        print(escape_invisible(f"mymcp: error: {problem}"), file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = load_mnemosyne_settings()
        command = args.memory_command
        if command == "check":
            return run_memory_check(settings, out)
        if command != "import":
            _warn_of_unsafe_root()
        memory = _Memory(settings, writes=command == "import" and args.apply)
        try:
            return _dispatch(memory, args, out)
        finally:
            # Its index saves its snapshot now, while the command still runs, rather
            # than when the process exits: run in process (a test), that may be long
            # after the cache directory and the root are gone.
            memory.service.close()
    except MyMCPError as exc:
        return _error(str(exc))
    except MemoryOperationError as exc:
        return _error(_operation_failure(exc, _selection(args)))


def _selection(args: argparse.Namespace) -> tuple[str, ...]:
    """The directories a command reads, scope first, as far as its arguments name them."""
    names = [getattr(args, key, None) for key in ("scope", "namespace", "collection")]
    if names[0] not in _SCOPES:
        return ()
    taken = []
    for name in names:
        if not isinstance(name, str):
            break
        taken.append(name)
    return tuple(taken)


def _dispatch(memory: _Memory, args: argparse.Namespace, out: TextIO) -> int:
    command = args.memory_command
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


def _operation_failure(exc: MemoryOperationError, selection: Sequence[str] = ()) -> str:
    """The tool's message, and for an unusable root (or a directory of the `selection`
    below it) the path and what is wrong with it: the tools may not name paths, this
    terminal must."""
    text = f"{exc.message} (code={exc.code.value})"
    if exc.code is not ErrorCode.MEMORY_SOURCE_UNAVAILABLE:
        return text
    return _source_fault(selection) or f"{check_root().root}: {text}"


def _source_fault(selection: Sequence[str]) -> str | None:
    """What is wrong with the memory root or the directories of `selection` below it (a
    scope, then a namespace and a collection in it), naming the path; None when none of
    them shows a fault."""
    fault = _root_fault()
    if fault is None and selection:
        fault = container_fault(check_root().root, selection)
    return fault


def _root_fault() -> str | None:
    """What is wrong with the memory root, naming it, or None when it can be used (or
    is absent, to be created by the first remember)."""
    faults = [finding for finding in check_root().findings if finding.severity == "error"]
    return faults[0].render() if faults else None


def _warn_of_unsafe_root() -> None:
    """A root others may write to is read all the same, as the server reads it (refusing
    would cost the user their memory for a mode bit), but whoever reads it is told: what
    it holds may not all be theirs. Imports refuse it, as `check` fails on it."""
    for finding in check_root().findings:
        if finding.code == "memory_root_unsafe_permissions":
            print(escape_invisible(f"mymcp: warning: {finding.render()}"), file=sys.stderr)


def _error(text: str) -> int:
    print(escape_invisible(f"mymcp: error: {text}"), file=sys.stderr)
    return EXIT_FAILURE


def _display(parts: Sequence[str]) -> str:
    return "/".join(parts)


def _echoed(argument: str) -> str:
    """An argument as an error repeats it: cut short when it is longer than `_ECHOED`.
    (`_error` makes it safe for the terminal.)"""
    return argument if len(argument) <= _ECHOED else argument[:_ECHOED] + "..."


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
                print(json_for_terminal(item), file=out)
            else:
                title = row.title if row.title is not None else "(no title)"
                line = f"{_display(row.parts)}  {state}  {row.kind or '-'}  {title}"
                print(escape_invisible(line), file=out)
    if not args.json:
        print(_counted(inventory.count, "memory", "memories"), file=sys.stderr)
    return EXIT_OK


def _show(memory: _Memory, target: str, out: TextIO) -> int:
    if not target.strip():
        return _error("nothing to show: give a reference (JSON), a record file or a path")
    if target.lstrip().startswith("{"):
        try:
            reference = parse_reference(load_strict_json(target))
        except StrictJsonError:
            reference = None
        if reference is None:
            return _error("not a memory reference: copy one exactly as a tool returned it")
        answer = memory.service.inspect({"reference": reference.to_json()}).payload
        if answer.get("code") == "memory_source_unavailable":
            # The terminal is the operator's: name what is in the way, as `list` does.
            if isinstance(reference, V2Reference):
                fault = _source_fault(reference_parts(reference)[:-1])
            else:
                fault = _source_fault((reference.scope.value,))
            if fault is not None:
                return _error(fault)
        print(json_for_terminal(answer, indent=2), file=out)
        return EXIT_OK if answer.get("status") == "ok" else EXIT_FAILURE
    path = Path(target)
    # `os.path.exists` is false for a name too long, below a file or in a loop, where
    # `Path.exists` raises; such a name is then looked for under the root, and not found.
    if not path.is_absolute() and not os.path.exists(path):
        path = memory.root / target  # a path under the root, as `memory list` prints it
    try:
        parts = Path(os.path.abspath(path)).relative_to(memory.root).parts
    except ValueError:
        return _error(f"{_echoed(str(path))} is not under the memory root {memory.root}")
    record, problem = _read_file(memory.root, parts)
    if problem is not None:
        # A root or a scope that cannot be read is named itself, not as this file.
        fault = _source_fault(parts[:1] if parts and parts[0] in _SCOPES else ())
        if fault is not None:
            return _error(fault)
        text = PROBLEM_TEXT.get(problem, problem)
        where = memory.root.joinpath(_echoed(_display(parts)))
        logged = file_id(parts, logged_file_key())
        return _error(f"{where}: {text} (reason={problem}, file={logged})")
    assert record is not None
    print(json_for_terminal(record.public_json(), indent=2), file=out)
    return EXIT_OK


def _read_file(root: Path, parts: Sequence[str]) -> tuple[Any, str | None]:
    """The record in the file at `parts` below the root, or the reason the server would
    skip it (the server never enters a linked directory below the root either)."""
    path = root.joinpath(*parts)
    if len(parts) - 2 > MAX_DIRECTORY_DEPTH:  # directories between the scope and the file
        return None, "too_deep"
    try:
        for depth in range(1, len(parts)):
            directory = os.lstat(root.joinpath(*parts[:depth]))
            if stat.S_ISLNK(directory.st_mode):
                return None, "symlink"
            if not stat.S_ISDIR(directory.st_mode):
                return None, "unreadable"
            if unsafe_permissions(directory):  # the server does not enter it either
                return None, "unsafe_permissions"
        info = os.lstat(path)
    except OSError:
        return None, "unreadable"
    if stat.S_ISLNK(info.st_mode):
        return None, "symlink"
    if not stat.S_ISREG(info.st_mode):
        return None, "unreadable"
    if unsafe_permissions(info):
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
    if outcome.is_error:
        # Recall answers a fault of the root as a result, which names no path: the
        # terminal names the root and the fault, as the other commands do. Only a fault
        # that kept recall from reading counts (a write lock it cannot take does not).
        code = answer.get("code")
        unavailable = code == ErrorCode.MEMORY_SOURCE_UNAVAILABLE.value
        fault = _source_fault(_selection(args)) if unavailable else None
        if fault is not None:
            return _error(fault)
        if args.json:  # the tool's own answer, as a script asked for
            print(json_for_terminal(answer, indent=2), file=out)
            return EXIT_FAILURE
        field = f", field={answer['field']}" if "field" in answer else ""
        return _error(f"{answer.get('message')} (code={code}{field})")
    if args.json:
        print(json_for_terminal(answer, indent=2), file=out)
        return EXIT_OK
    for found in answer["memories"]:
        reference = parse_reference(found["reference"])
        where = (
            _display(reference_parts(reference))
            if isinstance(reference, V2Reference)
            else f"{args.scope} (legacy id {found['id']})"
        )
        matched = ", ".join(found.get("match", {}).get("terms", [])) or "-"
        line = f"  {found.get('title') or '(no title)'}  [matched: {matched}]"
        print(escape_invisible(where), escape_invisible(line), sep="\n", file=out)
    print(f"{len(answer['memories'])} found ({answer['status']})", file=sys.stderr)
    return EXIT_OK


# -- stats and check ---------------------------------------------------------------------


def _stats(memory: _Memory, as_json: bool, out: TextIO) -> int:
    """Counts per scope and namespace. A scope that cannot be read (a file in its place)
    does not hide the others: they are counted, the scope is named on stderr as every
    other command names it, and the command fails, for the counts are then not all."""
    index = memory.service.current_index()
    report: dict[str, Any] = {"root": str(memory.root), "scopes": {}, "unavailable": []}
    faults: list[str] = []
    for scope in Scope:
        try:
            index.refresh(scope, recursive=True, candidate_limit=CANDIDATE_LIMIT_MAX)
        except MemoryOperationError as exc:
            fault = _scope_blocked(exc, scope)
            if fault is None:
                raise
            faults.append(fault)
            report["unavailable"].append(scope.value)
            # Counted as `memory check` counts it, one entry passed over in the scope
            # itself, so that the skipped total still matches the check's problems.
            report["scopes"][scope.value] = {"-": {**_NOTHING, "skipped": 1}}
            continue
        namespaces = _scope_counts(index, scope)
        if namespaces:
            report["scopes"][scope.value] = namespaces
    if as_json:
        print(json_for_terminal(report, indent=2), file=out)
    else:
        _print_table(memory.root, report["scopes"], out)
    for fault in faults:
        _error(fault)
    return EXIT_FAILURE if faults else EXIT_OK


def _scope_blocked(exc: MemoryOperationError, scope: Scope) -> str | None:
    """The fault of one scope's own entry that made reading it fail, named as the other
    commands name it; None when the fault is elsewhere (the root itself: then nothing
    can be counted, and the root's fault is the one to name)."""
    if exc.code is not ErrorCode.MEMORY_SOURCE_UNAVAILABLE or _root_fault() is not None:
        return None
    return scope_fault(check_root().root, scope.value)


_COLUMNS: Final = ("active", "archived", "legacy", "skipped", "bytes")
_NOTHING: Final[Mapping[str, int]] = dict.fromkeys(_COLUMNS, 0)


def _print_table(root: Path, scopes: Mapping[str, Mapping[str, Any]], out: TextIO) -> None:
    print(escape_invisible(f"memory root: {root}"), file=out)
    print(_row("scope / namespace", _COLUMNS), file=out)
    totals = [0] * len(_COLUMNS)
    for scope, namespaces in scopes.items():
        for name, counts in namespaces.items():
            values = [counts[key] for key in _COLUMNS]
            totals = [a + b for a, b in zip(totals, values, strict=True)]
            print(_row(escape_invisible(f"{scope} / {name}"), values), file=out)
    print(_row("total", totals), file=out)


def _scope_counts(index: MemoryIndex, scope: Scope) -> dict[str, dict[str, int]]:
    """One scope's counts per namespace ("-" for what lies directly in the scope), as
    the index last saw it. Skipped files are counted from the problems `memory check`
    names, not from the tally: the tally holds only files the index read, and misses a
    link or a file too deep, which it never reads."""
    skipped = Counter(_namespace_of(problem.parts) for problem in index.problems(scope))
    tallies = index.tally(scope)
    counts: dict[str, dict[str, int]] = {}
    for name in sorted(tallies.keys() | skipped.keys()):
        tally = tallies.get(name)
        row = {
            "active": tally.active if tally else 0,
            "archived": tally.archived if tally else 0,
            "legacy": tally.legacy if tally else 0,
            "skipped": skipped[name],
            "bytes": tally.bytes if tally else 0,
        }
        if row["active"] or row["archived"] or row["legacy"] or row["skipped"]:
            counts[name or "-"] = row
    return counts


def _namespace_of(parts: Sequence[str]) -> str:
    """The namespace a skipped entry counts under: "" for a record file directly in the
    scope; a skipped namespace directory (or a link in its place) is that namespace's."""
    if len(parts) > 2 or (len(parts) == 2 and not parts[1].endswith(RECORD_SUFFIX)):
        return parts[1]
    return ""


def _row(label: str, cells: Sequence[object]) -> str:
    """A table line; `label` is padded as shown (escaped, with wide characters counted
    twice), so that the numbers stay in their columns."""
    shown = sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in label)
    return label + " " * max(0, 40 - shown) + "".join(f" {cell!s:>9}" for cell in cells)


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
            print(json_for_terminal(found.record.to_json()), file=out)
            written += 1
    note = (
        f"; {_counted(legacy, 'legacy record', 'legacy records')} left out (no namespace to "
        "import them into)"
        if legacy
        else ""
    )
    print(f"exported {_counted(written, 'record', 'records')}{note}", file=sys.stderr)
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


# How far past a too-long line's start its end is looked for: an input with no line end
# in that much (a device such as /dev/zero, or no text at all) is not read to its end.
_SKIP_BYTES: Final = 16 * 1024 * 1024


class _Unending(Exception):
    """A line too long to be a record runs on past `_SKIP_BYTES` with no end."""


def _lines(handle: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """Numbered lines of at most `_LINE_BYTES`; a longer line is read past, as None, or
    raises `_Unending` when it has not ended `_SKIP_BYTES` on."""
    number = 0
    while line := handle.readline(_LINE_BYTES + 1):
        number += 1
        if len(line) <= _LINE_BYTES:
            yield number, line
            continue
        skipped = len(line)
        while line and not line.endswith(b"\n"):
            if skipped > _SKIP_BYTES:
                raise _Unending(number)
            line = handle.readline(_LINE_BYTES + 1)
            skipped += len(line)
        yield number, None


def _import(memory: _Memory, file: Path, apply: bool, out: TextIO) -> int:
    """Remember each record of a JSON-lines file (as `memory export` writes them), with
    `memory_remember`'s checks; a dry run unless ``apply``. Archived records are left
    out, an identical memory is reported and kept, and nothing is ever overwritten."""
    fault = _root_fault()  # or every valid line would read as invalid
    if fault is not None:
        return _error(fault)
    importer = _Importer(memory, apply)
    counts = {"new": 0, "existing": 0, "skipped": 0, "invalid": 0, "busy": 0}
    name = _echoed(str(file))
    try:
        handle = open(file, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        return _error(f"{name}: {exc.strerror}")
    with handle:
        try:
            for number, data in _lines(handle):
                text, verdict = _decoded(data)
                if text is not None:
                    if not text.strip():
                        continue
                    verdict = importer.line(text)
                counts[verdict[0]] += 1
                print(escape_invisible(f"{name}:{number}: {verdict[1]}"), file=out)
                if verdict[0] == "busy":
                    # Another process kept the memory's lock past the wait: the file is
                    # not at fault, and every later line would wait as long again.
                    # Running the same import again finds the lines done so far present.
                    print(
                        f"stopped at line {number}: another writer held the memory lock; "
                        "this line and those after it were not imported. Run the same "
                        "command again to go on (what was imported counts as already "
                        "present).",
                        file=out,
                    )
                    break
        except _Unending as stop:
            counts["invalid"] += 1
            ending = (
                f"{name}:{stop.args[0]}: longer than {_LINE_BYTES} bytes, and no line end in "
                f"the next {_SKIP_BYTES // (1024 * 1024)} MiB: no JSON-lines file; stopped there"
            )
            print(escape_invisible(ending), file=out)
    action = "remembered" if apply else "would remember"
    print(
        f"{action} {counts['new']}, already present {counts['existing']}, "
        f"left out {counts['skipped']}, invalid {counts['invalid']}"
        + ("" if apply else " (dry run: add --apply to write)"),
        file=out,
    )
    return EXIT_FAILURE if counts["invalid"] or counts["busy"] else EXIT_OK


def _decoded(data: bytes | None) -> tuple[str | None, tuple[str, str]]:
    """A line's text, or the verdict on a line that cannot hold a record at all."""
    if data is None:
        return None, ("invalid", f"longer than {_LINE_BYTES} bytes, the most one record takes")
    try:
        return data.decode("utf-8"), ("invalid", "")
    except UnicodeDecodeError as exc:
        where = f"byte 0x{data[exc.start]:02x} at column {exc.start + 1}"
        return None, ("invalid", f"not UTF-8 ({where})")


_JSON_FAULTS: Final[Mapping[StrictJsonReason, str]] = {
    StrictJsonReason.TOO_LARGE: "too large",
    StrictJsonReason.INVALID_UTF8: "an unpaired surrogate, which is no Unicode text",
    # Only an integer too long to read fails without the decoder's own complaint.
    StrictJsonReason.INVALID_JSON: "an integer with too many digits",
    StrictJsonReason.DUPLICATE_KEY: "repeats a key",
    StrictJsonReason.NON_FINITE: "NaN or an infinite number",
    StrictJsonReason.TOO_DEEP: f"nested deeper than {DEFAULT_MAX_DEPTH} levels",
}


def _json_fault(exc: StrictJsonError) -> str:
    """Why a line is no strict JSON document, in a few words (never the line itself)."""
    detail, where = exc.diagnostic.detail, exc.diagnostic.location
    if exc.reason is StrictJsonReason.INVALID_JSON and detail:
        # The standard library words one complaint "Invalid control character at".
        detail = detail.removesuffix(" at")
        return f"{detail} at column {where.column}" if where.column else detail
    return _JSON_FAULTS.get(exc.reason, exc.reason.value)


def _lifecycle_fault(document: Mapping[str, Any]) -> str | None:
    """What is wrong with a line's lifecycle, or None. A line without one (written by
    hand) is a new active memory; a state import does not know is refused rather than
    taken to be active."""
    lifecycle = document.get("lifecycle")
    states = " or ".join(LIFECYCLE_STATES)
    code = ErrorCode.INVALID_RECORD.value
    if lifecycle is None:
        return None
    if not isinstance(lifecycle, dict):
        return f"{code} (lifecycle): lifecycle must be an object with a state of {states}"
    if "state" not in lifecycle:
        return f"{code} (lifecycle.state): lifecycle has no state; it takes {states}"
    state = lifecycle["state"]
    if isinstance(state, str) and state in LIFECYCLE_STATES:
        return None
    return f"{code} (lifecycle.state): lifecycle.state must be {states}; got {shown(state)}"


_LEGACY_LINE: Final = (
    "a legacy (schema_version 1) record: it names no namespace to import it into; copy "
    "its file into the scope's directory instead, where it is read as it is"
)


class _Importer:
    """Imports the lines of one file, or rehearses them. A dry run writes nothing, so the
    root it reads never holds what the file's earlier lines would have added: it keeps
    that itself (which memories, and how many files per scope) to answer each line as
    `--apply` will, a repeat of an earlier line and a scope filled up included."""

    def __init__(self, memory: _Memory, apply: bool) -> None:
        self._memory = memory
        self._apply = apply
        self._mutations = MutationService(memory.service, memory.settings.candidate_limit)
        self._rehearsed: set[int] = set()
        self._added: Counter[Scope] = Counter()
        # What each scope held when the rehearsal first needed it: a rehearsal writes
        # nothing, so counting it again for every later line would find the same.
        self._held: dict[Scope, int] = {}

    def line(self, line: str) -> tuple[str, str]:
        """The verdict on one line: its count ("new", "existing", "skipped", "invalid")
        and what to print."""
        try:
            # Strict, as every record file is read: no NaN, repeated key, deep nesting or
            # integer too long to read gets further than this line's report.
            document = load_strict_json(line, unicode_text=True)
        except StrictJsonError as exc:
            return "invalid", f"not JSON ({_json_fault(exc)})"
        if not isinstance(document, dict):
            return "invalid", "not a JSON object"
        version = document.get("schema_version")
        if type(version) is int and version == 1:
            # A legacy record names no namespace: there is nowhere to put it (export
            # leaves such records out for the same reason).
            return "invalid", _LEGACY_LINE
        fault = _lifecycle_fault(document)
        if fault is not None:
            return "invalid", fault
        lifecycle = document.get("lifecycle")
        if isinstance(lifecycle, dict) and lifecycle["state"] == "archived":
            return "skipped", "archived: left out (import brings in active memories only)"
        arguments = _remember_arguments(document)
        outcome = self._mutations.import_record(arguments, dry_run=not self._apply)
        answer = outcome.payload
        if outcome.is_error:
            if answer["code"] == ErrorCode.MEMORY_BUSY.value:
                return "busy", f"{answer['code']}: {answer['message']}"
            return "invalid", self._refusal(answer, arguments)
        reference = parse_reference(answer["reference"])
        where = _display(reference_parts(reference)) if isinstance(reference, V2Reference) else "?"
        status = answer["status"]
        if status in ("already_exists", "existing_archived"):
            return "existing", f"{status}: {where}"
        if status == "would_remember" and isinstance(reference, V2Reference):
            # The id is drawn when the record is written; a dry run's would be a different one.
            where = _display((*reference_parts(reference)[:-1], "<new id>.json"))
            # `--apply` finds a repeat before it counts the scope: so does the rehearsal.
            identity = answer["identity"]
            if identity in self._rehearsed:
                return "existing", f"already_exists: {where} (an earlier line of this file)"
            if self._filled(reference.scope):
                return "invalid", self._over_limit()
            self._rehearsed.add(identity)
            self._added[reference.scope] += 1
        return "new", f"{status}: {where}"

    def _refusal(self, answer: Mapping[str, Any], arguments: Mapping[str, Any]) -> str:
        code = answer["code"]
        if code == ErrorCode.MEMORY_SOURCE_UNAVAILABLE.value:
            # What is in the way of the record's directories, named as `memory check`
            # names it: the tool may not show paths, this terminal must. A rehearsal
            # only finds it after the scope's count, which `--apply` checks first.
            container = _container_of(arguments)
            if container is None:  # not reached: the tool accepted the arguments
                return f"{code}: {_unplaced_fault()}"
            if not self._apply and self._filled(Scope(container[0])):
                return self._over_limit()
            fault = container_fault(check_root().root, container)
            return f"{code}: {fault or _unplaced_fault()}"
        # Fields are named as the file has them: the record keeps its origin in
        # `provenance`, where the tool's arguments have it at the top.
        named = answer.get("field")
        field = f" ({'provenance.origin' if named == 'origin' else named})" if named else ""
        message = answer["message"]
        if code == "invalid_origin":
            # Import keeps any origin a record may have, not only the two an agent may
            # claim, which is what the tool's own message lists.
            message = f"origin must be one of {', '.join(ORIGINS)}"
        return f"{code}{field}: {message}"

    def _filled(self, scope: Scope) -> bool:
        """Whether the records this rehearsal would already have added to ``scope`` fill
        it to the candidate limit, so that `--apply` refuses the next one there."""
        added = self._added[scope]
        if not added:
            return False  # the tool itself counted what the scope holds
        limit = self._memory.settings.candidate_limit
        if scope not in self._held:
            index = self._memory.service.current_index()
            selection = index.refresh(scope, recursive=True, candidate_limit=limit)
            self._held[scope] = selection.candidates
        return self._held[scope] + added >= limit

    def _over_limit(self) -> str:
        refusal = candidate_limit_exceeded(self._memory.settings.candidate_limit, adding=True)
        return f"{refusal.code.value}: {refusal.message}"


def _remember_arguments(document: Mapping[str, Any]) -> dict[str, Any]:
    """`memory_remember`'s arguments from an exported record: its id, times, revision and
    any other field are not arguments, and are not kept."""
    provenance = document.get("provenance")
    arguments = {key: document.get(key) for key in _REMEMBERED}
    arguments["origin"] = provenance.get("origin") if isinstance(provenance, dict) else None
    if document.get("occurred_at") is not None:
        arguments["occurred_at"] = document["occurred_at"]
    if isinstance(arguments["namespace"], dict):
        arguments["namespace"] = dict(arguments["namespace"])
    return arguments


def _container_of(arguments: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The scope, namespace and collection directories a record with these (accepted)
    arguments is written to, or None when they do not name them."""
    scope, namespace = arguments.get("scope"), arguments.get("namespace")
    collection = arguments.get("collection")
    if scope not in _SCOPES or not isinstance(namespace, dict):
        return None
    names = [namespace.get("id")]
    if collection is not None:
        names.append(collection.get("id") if isinstance(collection, dict) else None)
    if not all(isinstance(name, str) and is_identifier(name) for name in names):
        return None
    return (scope, *names)


def _unplaced_fault() -> str:
    """The root's fault when a write failed with nothing in its way below the root; the
    root and the tool's sentence when the root shows none either (it changed meanwhile)."""
    text = ErrorCode.MEMORY_SOURCE_UNAVAILABLE.message
    return _root_fault() or f"{check_root().root}: {text}"


def _counted(number: int, one: str, many: str) -> str:
    """`1 memory`, `2 memories`: a summary line reads as a sentence."""
    return f"{number} {one if number == 1 else many}"

"""What `mymcp check` and `mymcp memory check` say about the memory: one set of checks
of the root itself, one walk naming every file the server passes over, one comparison
of the scopes with the candidate limit.

`mymcp check` shows the summary, `mymcp memory check` every file. Both run on the
operator's own terminal, so they name paths; they change and create nothing.
"""

from __future__ import annotations

import difflib
import logging
import os
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from mymcp._escaping import escape_invisible
from mymcp.errors import Diagnostic, Location
from mymcp.plugins.mnemosyne._settings import (
    KNOWN_VARIABLES,
    MEMORY_ROOT_ENV,
    VARIABLE_PREFIX,
    MnemosyneSettings,
    index_snapshot_directory,
    memory_root,
    unknown_variables,
)
from mymcp.plugins.mnemosyne.memory import (
    CANDIDATE_LIMIT_MAX,
    LOCK_FILE_NAME,
    MAX_RECORD_BYTES,
    MemoryIndex,
    MemoryOperationError,
    Problem,
    Scope,
    dangling_link_on,
    file_id,
    file_key,
    unsafe_permissions,
)

__all__ = [
    "PROBLEM_TEXT",
    "RootCheck",
    "check_memory",
    "check_root",
    "container_fault",
    "logged_file_key",
    "memory_problems",
    "problem_line",
    "run_memory_check",
    "scope_fault",
]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1

# A scope's entry under the root that is no readable directory (a file, a FIFO): unlike
# a skipped file, it makes the whole scope unavailable.
_SCOPE_BLOCKED: Final = "scope_unavailable"
PROBLEM_TEXT: Final[Mapping[str, str]] = {
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
    "unsafe_permissions": "writable by group or others, or owned by another user",
    "not_a_directory": "a file where the namespace or collection directory of that id "
    "would be: that container cannot be read or written while it is there",
    "not_a_file": "a directory named as a canonical record file is; nothing in it is read",
    _SCOPE_BLOCKED: "a scope's place, but no directory that can be read (a file, or a "
    "directory this user may not read): every read and write of the scope fails until it "
    "is moved away or made readable",
}

_RAISE_LIMIT: Final = (
    "raise [memory] candidate_limit in ~/.mnemosyne/config.toml or MNEMOSYNE_MEMORY_CANDIDATE_LIMIT"
)


_SCOPE_LINK: Final = (
    "a symbolic link in a scope's place: links are never followed, so the scope reads as "
    "empty and every write to it fails until a directory replaces the link"
)


def _blocks_scope(problem: Problem) -> bool:
    """Whether the problem is the scope's own entry, which leaves the whole scope
    unusable (a link is skipped like any linked file, but here it is the directory)."""
    return problem.reason == _SCOPE_BLOCKED or (
        problem.reason == "symlink" and len(problem.parts) == 1
    )


def _problem_text(problem: Problem) -> str:
    if problem.reason == "symlink" and _blocks_scope(problem):
        return _SCOPE_LINK
    return PROBLEM_TEXT.get(problem.reason, problem.reason)


def logged_file_key() -> bytes:
    """The key the server's log names files with (`file_id`), from the cache directory
    (made there by whichever process needs it first, this one included)."""
    return file_key(index_snapshot_directory())


def problem_line(root: Path, problem: Problem, key: bytes) -> str:
    """`<path>: <why> (reason=<reason>, file=<file id>)`; the file id (under ``key``,
    see `logged_file_key`) is what the server logs, so a log line leads to the file."""
    path = root.joinpath(*problem.parts)
    text = _problem_text(problem)
    return f"{path}: {text} (reason={problem.reason}, file={file_id(problem.parts, key)})"


@dataclass(frozen=True, slots=True)
class RootCheck:
    """The memory root as one operation would resolve it, whether it is an existing
    directory to walk, and what is wrong with it (errors) or worth a look (warnings)."""

    root: Path
    present: bool
    findings: tuple[Diagnostic, ...]

    @property
    def failed(self) -> bool:
        return any(finding.severity == "error" for finding in self.findings)

    @property
    def state(self) -> str:
        """What follows the root's path on the checks' first line: a note for a root
        that is absent and that the first remember can create. A root that cannot be
        created gets none: the error after it says why."""
        if self.present or self.failed or self.root.exists():
            return ""
        return " (absent; created by the first remember)"


def _unknown_variable_warnings(environ: Mapping[str, str]) -> Iterator[Diagnostic]:
    # Every name shares the prefix, so only what follows it tells a near miss.
    suffixes = {name.removeprefix(VARIABLE_PREFIX): name for name in KNOWN_VARIABLES}
    for name in unknown_variables(environ):
        guess = difflib.get_close_matches(name.removeprefix(VARIABLE_PREFIX), suffixes, n=1)
        hint = f"did you mean {suffixes[guess[0]]}? " if guess else ""
        yield Diagnostic(
            "unknown_environment",
            "Mnemosyne does not know this environment variable and ignores it",
            Location(source=f"${name}"),
            f"{hint}Mnemosyne reads {', '.join(KNOWN_VARIABLES)}",
            severity="warning",
        )


def check_root(environ: Mapping[str, str] | None = None) -> RootCheck:
    """Check the root before anything reads it: an existing directory (or one the first
    `memory_remember` can create), not writable by group or others, and this user's. (A
    relative root is refused earlier, with the settings.)

    Raises `MnemosyneSettingsError` when no root can be resolved at all (see
    `memory_root`).
    """
    env = os.environ if environ is None else environ
    configured = memory_root(env)
    root = Path(os.path.abspath(configured))
    where = Location(source=str(root))
    findings = list(_unknown_variable_warnings(env))
    link = dangling_link_on(root) if not root.exists() else None
    if link is not None:
        what = "it is" if link == root else f"{link} is"
        findings.append(
            Diagnostic(
                "memory_root_unavailable",
                "Mnemosyne memory root cannot be created",
                where,
                f"{what} a symbolic link to a path that does not exist, so no directory can "
                f"be made there; create its target, or set {MEMORY_ROOT_ENV} to a directory",
            )
        )
        return RootCheck(root, False, tuple(findings))
    if not root.exists():
        ancestor = next((path for path in root.parents if path.exists()), None)
        problem = None
        if ancestor is None:
            problem = "no part of the path exists"
        elif not ancestor.is_dir():
            problem = f"{ancestor} is not a directory"
        elif not os.access(ancestor, os.W_OK | os.X_OK):
            problem = f"{ancestor} is not writable"
        if problem is not None:
            findings.append(
                Diagnostic(
                    "memory_root_unavailable",
                    "Mnemosyne memory root cannot be created",
                    where,
                    f"{problem}; set {MEMORY_ROOT_ENV} to a directory you own",
                )
            )
        return RootCheck(root, False, tuple(findings))
    if not root.is_dir():
        findings.append(
            Diagnostic(
                "memory_root_unavailable",
                "Mnemosyne memory root is not a directory",
                where,
                f"set {MEMORY_ROOT_ENV} to a directory (or to where one can be created)",
            )
        )
        return RootCheck(root, False, tuple(findings))
    info = os.stat(root)
    mode = stat.S_IMODE(info.st_mode)
    # The server's own rule (it warns of such a root at every start): writable by
    # others, or another user's, is a root someone else may have filled.
    if unsafe_permissions(info):
        if mode & 0o022:
            problem, fix = "is writable by others", f"mode {mode:04o}; run: chmod go-w {root}"
        else:
            problem = "belongs to another user"
            fix = (
                f"owned by uid {info.st_uid}, this command runs as uid {os.geteuid()}: run "
                "MyMCP as the root's owner, or give it to this user (chown)"
            )
        findings.append(
            Diagnostic(
                "memory_root_unsafe_permissions", f"Mnemosyne memory root {problem}", where, fix
            )
        )
    findings.extend(_lock_file_findings(root))
    return RootCheck(root, True, tuple(findings))


def _lock_file_findings(root: Path) -> list[Diagnostic]:
    """The root's lock file, which every write takes: anything but a regular file there
    (or nothing, which the first write creates) refuses every write."""
    lock = root / LOCK_FILE_NAME
    try:
        info = os.lstat(lock)
    except FileNotFoundError:
        return []
    except OSError as exc:
        what = f"cannot be examined ({exc.strerror or type(exc).__name__})"
    else:
        if stat.S_ISREG(info.st_mode):
            return []
        what = f"is {_file_kind(info.st_mode)}, not a regular file"
    return [
        Diagnostic(
            "memory_lock_unusable",
            "Mnemosyne cannot take the memory root's write lock",
            Location(source=str(lock)),
            f"the lock file {what}: every write fails (memory_source_unavailable) until "
            "it is removed; the next write creates it again",
        )
    ]


def _file_kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device or other special file"


def memory_problems(root: Path) -> tuple[list[Problem], dict[Scope, int]]:
    """Every file and directory the server would pass over under ``root`` (unsafe
    permissions included), with the number of candidate files per scope. Reads every file
    once, in a fresh index: nothing is cached, changed or created (and nothing logged).
    """
    index = MemoryIndex(root, watch=False, sweep_temps=False)  # a check changes nothing
    problems: set[Problem] = set()
    sizes: dict[Scope, int] = {}
    # The report names every file; the store's own warnings would only repeat it.
    store_log = logging.getLogger("mymcp.memory.store")
    level = store_log.level
    store_log.setLevel(logging.ERROR)
    try:
        for scope in Scope:
            try:
                selection = index.refresh(
                    scope, recursive=True, candidate_limit=CANDIDATE_LIMIT_MAX
                )
            except MemoryOperationError:
                sizes[scope] = 0
                problems.add(Problem((scope.value,), _SCOPE_BLOCKED))
                continue
            sizes[scope] = selection.candidates
            problems.update(index.problems(scope))
    finally:
        store_log.setLevel(level)
        index.close()
    return sorted(problems, key=lambda problem: (problem.parts, problem.reason)), sizes


def _over_limit(root: Path, sizes: Mapping[Scope, int], limit: int) -> list[Diagnostic]:
    return [
        Diagnostic(
            "candidate_limit_exceeded",
            "Mnemosyne scope holds more files than the candidate limit",
            Location(source=str(root / scope.value)),
            f"{size} files, limit {limit}: reads of the scope fail; {_RAISE_LIMIT}",
        )
        for scope, size in sizes.items()
        if size > limit
    ]


def _largest(sizes: Mapping[Scope, int]) -> Scope:
    return max(sizes, key=lambda scope: sizes[scope])


def _scope_unavailable(path: Path, text: str) -> Diagnostic:
    return Diagnostic(
        "memory_scope_unavailable", "Mnemosyne cannot read a scope", Location(str(path)), text
    )


def scope_fault(root: Path, scope: str) -> str | None:
    """What keeps `scope` of `root` from being read, as `mymcp check` names it (a link or
    something other than a directory in its place), or None."""
    path = root / scope
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None  # absent: read as empty, created by the first write
    if stat.S_ISLNK(mode):
        return _scope_unavailable(path, _SCOPE_LINK).render()
    if not stat.S_ISDIR(mode) or not _opens_as_directory(path):
        return _scope_unavailable(path, PROBLEM_TEXT[_SCOPE_BLOCKED]).render()
    return None


def _opens_as_directory(path: Path) -> bool:
    """Whether `path` opens as a directory, as every read and write of the memory opens
    one (a directory this user may not read does not)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


def container_fault(root: Path, parts: Sequence[str]) -> str | None:
    """What keeps a read or a write from reaching the directory ``parts`` below ``root``
    (a scope, then a namespace and a collection in it), named as the checks name it, or
    None when every step is a directory that opens or is still to be created. A write never
    goes through a link, into something other than a directory, or into a directory
    others may write to, so the first such step is what is in the way."""
    fault = scope_fault(root, parts[0]) if parts else None
    if fault is not None:
        return fault
    for depth in range(1, len(parts) + 1):
        path = root.joinpath(*parts[:depth])
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None  # this step and those below it are created by the write
        except OSError:
            reason = "unreadable"
        else:
            if stat.S_ISLNK(info.st_mode):
                reason = "symlink"
            elif not stat.S_ISDIR(info.st_mode):
                reason = "not_a_directory"
            elif unsafe_permissions(info):
                reason = "unsafe_permissions"
            elif not _opens_as_directory(path):
                reason = "unreadable"
            else:
                continue
        return problem_line(root, Problem(tuple(parts[:depth]), reason), logged_file_key())
    return None


def check_memory(settings: MnemosyneSettings) -> tuple[list[str], list[Diagnostic]]:
    """`mymcp check`'s view of the memory: summary lines, and findings (errors: a root
    that is relative, unsafe or cannot be created, a scope over the candidate limit;
    warnings: files the server skips, which `mymcp memory check` names, and unknown
    `MNEMOSYNE_MEMORY_*` variables)."""
    checked = check_root()
    root = checked.root
    findings = list(checked.findings)
    if not checked.present:
        return [escape_invisible(f"memory: {root}{checked.state}")], findings
    problems, sizes = memory_problems(root)
    largest = _largest(sizes)
    limit = settings.candidate_limit
    lines = [
        escape_invisible(
            f"memory: {root} ({sum(sizes.values())} files; largest scope {largest} holds "
            f"{sizes[largest]} of the candidate limit {limit})"
        )
    ]
    findings.extend(_over_limit(root, sizes, limit))
    blocked = [problem for problem in problems if _blocks_scope(problem)]
    for problem in blocked:
        findings.append(_scope_unavailable(root.joinpath(*problem.parts), _problem_text(problem)))
    problems = [problem for problem in problems if problem not in blocked]
    if problems:
        findings.append(
            Diagnostic(
                "memory_files_skipped",
                "Mnemosyne skips files under the memory root",
                Location(source=str(root)),
                f"{len(problems)} file(s); `mymcp memory check` names each and why",
                severity="warning",
            )
        )
    return lines, findings


def run_memory_check(settings: MnemosyneSettings, out: TextIO) -> int:
    """`mymcp memory check`: the root's own faults, then every file the server passes
    over and every scope over the candidate limit, one line each; exit 1 when any."""
    checked = check_root()
    root = checked.root
    print(escape_invisible(f"memory root: {root}{checked.state}"), file=out)
    errors = [finding for finding in checked.findings if finding.severity == "error"]
    for finding in checked.findings:
        if finding.severity == "warning":
            print(escape_invisible(f"mymcp: warning: {finding.render()}"), file=sys.stderr)
    for finding in errors:
        print(escape_invisible(finding.render()), file=out)
    problems: list[Problem] = []
    over: list[Diagnostic] = []
    if checked.present:
        problems, sizes = memory_problems(root)
        largest = _largest(sizes)
        print(
            f"records: {sum(sizes.values())} candidate files; largest scope {largest} holds "
            f"{sizes[largest]} (candidate limit {settings.candidate_limit})",
            file=out,
        )
        key = logged_file_key()
        for problem in problems:
            print(escape_invisible(problem_line(root, problem, key)), file=out)
        over = _over_limit(root, sizes, settings.candidate_limit)
        for finding in over:
            print(escape_invisible(finding.render()), file=out)
    count = len(errors) + len(problems) + len(over)
    if count:
        print(f"memory check: {count} problem(s)", file=out)
        return EXIT_FAILURE
    print("memory check: OK", file=out)
    return EXIT_OK

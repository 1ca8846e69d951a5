"""`mymcp memory …` against hostile input: lines `import` cannot take, arguments `show`
and `import` cannot use, memory text that would drive the terminal, files and scopes
`stats` must count as `check` does, and roots a dry run of `import` must judge as
`--apply` then does.

Like the other tests of these commands (tests/e2e/test_memory_cli_e2e.py), they run the
real `mymcp` in a private HOME; the two properties run `import` in process, over
generated input.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mymcp import cli
from mymcp._strictjson import StrictJsonError, load_strict_json
from mymcp.plugins.mnemosyne._memory_check import PROBLEM_TEXT
from tests.e2e.server import Sandbox, make_sandbox, run_cli
from tests.e2e.test_memory_cli_e2e import PROJECT
from tests.e2e.test_memory_cli_e2e import _remember as remembered

NOT_A_REFERENCE = "mymcp: error: not a memory reference: copy one exactly as a tool returned it"
# What must never reach the terminal raw (the categories the filter escapes).
ESCAPED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
HOSTILE_TITLE = "\x1b[31mRED\x1b[0m\x1b]0;pwned\x07"
HOSTILE_SHOWN = "\\x1b[31mRED\\x1b[0m\\x1b]0;pwned\\x07"


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return make_sandbox(tmp_path)


def _remember(sandbox: Sandbox, **arguments: Any) -> dict[str, Any]:
    """A project decision remembered through the plugin itself."""
    defaults = {"scope": "project", "namespace": PROJECT, "kind": "decision"}
    return remembered(sandbox, **{**defaults, **arguments})


def _path(answer: dict[str, Any]) -> str:
    reference = answer["reference"]
    return f"{reference['scope']}/{reference['namespace_id']}/{reference['id']}.json"


def _unreadable(
    sandbox: Sandbox, relative: str, shown: str | None = None, reason: str = "unreadable"
) -> str:
    parts = tuple(relative.split("/"))
    return (
        f"mymcp: error: {sandbox.memory_root}/{shown or relative}: {PROBLEM_TEXT[reason]} "
        f"(reason={reason}, file={sandbox.file_id(parts)})\n"
    )


# -- import: every line the strict decoder refuses, and unknown lifecycle states ----------


@pytest.mark.slow
def test_import_reports_each_line_the_strict_decoder_refuses(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    _remember(sandbox, title="Loopback only", content="The server binds to loopback only.")
    exported = run_cli(["memory", "export", "project"], sandbox.environ()).stdout
    dump = tmp_path / "hostile.jsonl"
    lines = [
        '{"x":' + "1" * 4301 + "}",
        "[" * 3000 + "]" * 3000,
        '{"title": NaN}',
        '{"title": -Infinity}',
        '{"title": 1e999}',
        '{"title": "a", "title": "b"}',
        '{"title": "\\ud800"}',
        '{"title": }',
        '{"title": "a\tb"}',  # a raw tab inside a string
        exported.rstrip("\n"),
    ]
    dump.write_text("\n".join(lines) + "\n")
    other = tmp_path / "other-root"
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(other)})
    imported = run_cli(["memory", "import", str(dump)], env)
    assert (imported.returncode, imported.stderr) == (1, "")
    assert imported.stdout.splitlines() == [
        f"{dump}:1: not JSON (an integer with too many digits)",
        f"{dump}:2: not JSON (nested deeper than 64 levels)",
        f"{dump}:3: not JSON (NaN or an infinite number)",
        f"{dump}:4: not JSON (NaN or an infinite number)",
        f"{dump}:5: not JSON (NaN or an infinite number)",
        f"{dump}:6: not JSON (repeats a key)",
        f"{dump}:7: not JSON (an unpaired surrogate, which is no Unicode text)",
        f"{dump}:8: not JSON (Expecting value at column 11)",
        f"{dump}:9: not JSON (Invalid control character at column 13)",
        f"{dump}:10: would_remember: project/mymcp/<new id>.json",
        "would remember 1, already present 0, left out 0, invalid 9 "
        "(dry run: add --apply to write)",
    ]
    applied = run_cli(["memory", "import", str(dump), "--apply"], env)
    assert applied.returncode == 1
    assert applied.stdout.splitlines()[-1] == (
        "remembered 1, already present 0, left out 0, invalid 9"
    )
    assert len(list(other.rglob("*.json"))) == 1


def test_import_says_why_a_legacy_record_cannot_be_imported(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    dump = tmp_path / "legacy.jsonl"
    lines = [{"schema_version": version, "id": "old-note", "content": "x"} for version in (1, True)]
    dump.write_text(
        "".join(json.dumps(line) + "\n" for line in lines) + '{"schema_version": 1.0}\n'
    )
    imported = run_cli(["memory", "import", str(dump)], sandbox.environ())
    assert imported.returncode == 1
    said = imported.stdout.splitlines()
    assert said[0] == (
        f"{dump}:1: a legacy (schema_version 1) record: it names no namespace to import it "
        "into; copy its file into the scope's directory instead, where it is read as it is"
    )
    # Only the integer 1 is a legacy record's version, as the record reader has it.
    assert "a legacy (schema_version 1) record" not in said[1]
    assert "a legacy (schema_version 1) record" not in said[2]


@pytest.mark.parametrize("source", ["/dev/zero", "file"])
def test_an_import_whose_line_never_ends_stops_with_a_line_that_says_so(
    sandbox: Sandbox, tmp_path: Path, source: str
) -> None:
    """A device with no line ends (or a file of one endless line) is not read to its end,
    which for /dev/zero would never come."""
    if source == "file":
        endless = tmp_path / "endless.jsonl"
        endless.write_bytes(b'{"id": 1}\n' + b"x" * (17 * 1024 * 1024) + b"\n{}\n")
        path, number = str(endless), 2
    else:
        path, number = source, 1
    imported = run_cli(["memory", "import", path], sandbox.environ())
    assert (imported.returncode, imported.stderr) == (1, "")
    said = imported.stdout.splitlines()
    assert said[-2] == (
        f"{path}:{number}: longer than 65537 bytes, and no line end in the next 16 MiB: no "
        "JSON-lines file; stopped there"
    )
    assert said[-1].endswith(f"invalid {number} (dry run: add --apply to write)")


@pytest.mark.slow
def test_a_dry_run_predicts_what_apply_does_with_repeats_inside_the_file(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    _remember(sandbox, title="Loopback only", content="The server binds to loopback only.")
    record = json.loads(run_cli(["memory", "export", "project"], sandbox.environ()).stdout)
    other_id = "mem_" + "c" * 32
    dump = tmp_path / "repeats.jsonl"
    dump.write_text(json.dumps(record) + "\n" + json.dumps({**record, "id": other_id}) + "\n")
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(tmp_path / "other-root")})
    rehearsed = run_cli(["memory", "import", str(dump)], env)
    applied = run_cli(["memory", "import", str(dump), "--apply"], env)
    assert rehearsed.stdout.splitlines()[-1] == (
        "would remember 1, already present 1, left out 0, invalid 0 (dry run: add --apply to write)"
    )
    assert applied.stdout.splitlines()[-1] == (
        "remembered 1, already present 1, left out 0, invalid 0"
    )


def test_import_refuses_a_lifecycle_state_it_does_not_know(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    _remember(sandbox, title="Loopback only", content="The server binds to loopback only.")
    record = json.loads(run_cli(["memory", "export", "project"], sandbox.environ()).stdout)
    variants: list[object] = [
        {"state": "zombie", "revision": 1},
        {"state": "Active", "revision": 1},
        {"state": None, "revision": 1},
        {"revision": 1},
        "active",
        {"state": "archived", "revision": 2},
        {"state": "active", "revision": 1},
    ]
    dump = tmp_path / "states.jsonl"
    dump.write_text("".join(json.dumps({**record, "lifecycle": life}) + "\n" for life in variants))
    other = tmp_path / "other-root"
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(other)})
    applied = run_cli(["memory", "import", str(dump), "--apply"], env)
    assert applied.returncode == 1
    state = "invalid_record (lifecycle.state): lifecycle.state must be active or archived"
    assert applied.stdout.splitlines()[:-2] == [
        f'{dump}:1: {state}; got "zombie"',
        f'{dump}:2: {state}; got "Active"',
        f"{dump}:3: {state}; got null",
        f"{dump}:4: invalid_record (lifecycle.state): lifecycle has no state; it takes "
        "active or archived",
        f"{dump}:5: invalid_record (lifecycle): lifecycle must be an object with a state of "
        "active or archived",
        f"{dump}:6: archived: left out (import brings in active memories only)",
    ]
    assert re.fullmatch(
        rf"{re.escape(str(dump))}:7: remembered: project/mymcp/mem_[0-9a-f]{{32}}\.json",
        applied.stdout.splitlines()[-2],
    )
    assert applied.stdout.splitlines()[-1] == (
        "remembered 1, already present 0, left out 1, invalid 5"
    )
    written = [json.loads(path.read_text()) for path in other.rglob("*.json")]
    assert [body["lifecycle"]["state"] for body in written] == ["active"]


# -- show and import: arguments that cannot name a file ----------------------------------


@pytest.mark.slow
def test_show_answers_an_argument_no_file_can_have_in_one_bounded_line(
    sandbox: Sandbox,
) -> None:
    record = _remember(sandbox, title="Kept", content="The one good record.")
    root = sandbox.memory_root
    (root / "loop").symlink_to("loop")  # a link to itself: ELOOP on every lookup below it
    long = "a" * 300
    expected = {
        long: _unreadable(sandbox, long, "a" * 200 + "..."),  # ENAMETOOLONG, also in the cwd
        "/" + long: f"mymcp: error: /{'a' * 199}... is not under the memory root {root}\n",
        f"{_path(record)}/x.json": _unreadable(sandbox, f"{_path(record)}/x.json"),  # ENOTDIR
        "loop/x.json": _unreadable(sandbox, "loop/x.json", reason="symlink"),  # never entered
        '{"a":' * 3000: NOT_A_REFERENCE + "\n",
        '{"schema_version": ' + "9" * 5000 + "}": NOT_A_REFERENCE + "\n",
        '{"schema_version": NaN}': NOT_A_REFERENCE + "\n",
        "": "mymcp: error: nothing to show: give a reference (JSON), a record file or a path\n",
        " ": "mymcp: error: nothing to show: give a reference (JSON), a record file or a path\n",
    }
    for argument, error in expected.items():
        shown = run_cli(["memory", "show", argument], sandbox.environ())
        assert (shown.returncode, shown.stdout, shown.stderr) == (1, "", error), argument[:40]


def test_show_never_enters_a_linked_directory_below_the_root(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    # The server skips a linked namespace directory; `show` does not read through one.
    record = _remember(sandbox, title="Kept", content="The one good record.")
    root = sandbox.memory_root
    outside = tmp_path / "outside"
    shutil.copytree(root / "project", outside)
    (root / "elsewhere").symlink_to(outside)
    relative = "elsewhere/" + _path(record).removeprefix("project/")
    shown = run_cli(["memory", "show", relative], sandbox.environ())
    assert (shown.returncode, shown.stdout) == (1, "")
    assert shown.stderr == _unreadable(sandbox, relative, reason="symlink")


def test_show_names_a_root_or_scope_that_cannot_be_read(sandbox: Sandbox) -> None:
    """As `list` does: the fault is the root's or the scope's, not the record's."""
    _remember(sandbox, title="Kept", content="The one good record.")
    blocked = sandbox.memory_root / "self"
    blocked.write_text("x")
    env = sandbox.environ()
    listed = run_cli(["memory", "list", "self"], env)
    assert listed.returncode == 1
    reference = {
        "schema_version": 2,
        "scope": "self",
        "namespace_id": "me",
        "collection_id": None,
        "id": "mem_" + "0" * 32,
    }
    by_reference = run_cli(["memory", "show", json.dumps(reference)], env)
    by_path = run_cli(["memory", "show", f"self/me/mem_{'0' * 32}.json"], env)
    for shown in (by_reference, by_path):
        assert (shown.returncode, shown.stdout, shown.stderr) == (1, "", listed.stderr)
    root_file = sandbox.root / "not-a-root"
    root_file.write_text("x")
    moved = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(root_file)})
    shown = run_cli(["memory", "show", f"project/mymcp/mem_{'0' * 32}.json"], moved)
    assert shown.returncode == 1
    assert shown.stderr.startswith(f"mymcp: error: {root_file}: Mnemosyne memory root is not")


def test_show_refuses_what_the_server_skips(sandbox: Sandbox) -> None:
    # A directory others may write to, and a file nested too deep: the server passes over
    # both (`memory check` names them), so `show` does not print them either.
    record = _remember(sandbox, title="Kept", content="The one good record.")
    root = sandbox.memory_root
    good = root / _path(record)
    deep = good.parent / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True, mode=0o700)
    (deep / good.name).write_bytes(good.read_bytes())
    nested = str((deep / good.name).relative_to(root))
    shown = run_cli(["memory", "show", nested], sandbox.environ())
    assert (shown.returncode, shown.stdout) == (1, "")
    assert "(reason=too_deep" in shown.stderr
    good.parent.chmod(0o775)
    shown = run_cli(["memory", "show", _path(record)], sandbox.environ())
    assert (shown.returncode, shown.stdout) == (1, "")
    assert shown.stderr == _unreadable(sandbox, _path(record), reason="unsafe_permissions")
    good.parent.chmod(0o700)
    assert run_cli(["memory", "show", _path(record)], sandbox.environ()).returncode == 0


@pytest.mark.slow
def test_reading_commands_change_nothing_in_the_root(sandbox: Sandbox) -> None:
    # The temp file of a write a killed process left: the server removes it when it
    # meets it; reading from the terminal leaves it, and takes no lock, creating nothing.
    record = _remember(sandbox, title="Kept", content="The one good record.")
    root = sandbox.memory_root
    good = root / _path(record)
    temp = good.parent / ".mem_0123456789abcdef0123456789abcdef.0123456789abcdef.tmp"
    temp.write_bytes(good.read_bytes())
    temp.chmod(0o600)
    lock = root / ".mnemosyne.lock"
    lock.unlink(missing_ok=True)
    before = sorted(str(path.relative_to(root)) for path in root.rglob("*"))
    env = sandbox.environ()
    for command in (
        ["memory", "list", "project"],
        ["memory", "search", "project", "good record"],
        ["memory", "show", _path(record)],
        ["memory", "stats"],
        ["memory", "check"],
        ["memory", "export", "project"],
    ):
        assert run_cli(command, env).returncode in (0, 1), command
    assert sorted(str(path.relative_to(root)) for path in root.rglob("*")) == before


@pytest.mark.slow
def test_import_names_a_file_it_cannot_open_in_one_bounded_line(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    a_file = tmp_path / "plain"
    a_file.write_text("")
    expected = {
        "b" * 300: f"{'b' * 200}...: File name too long",
        str(a_file / "x.jsonl"): f"{a_file}/x.jsonl: Not a directory",
        str(tmp_path): f"{tmp_path}: Is a directory",
    }
    for argument, error in expected.items():
        imported = run_cli(["memory", "import", argument], sandbox.environ())
        assert (imported.returncode, imported.stdout, imported.stderr) == (
            1,
            "",
            f"mymcp: error: {error}\n",
        )


# -- what reaches the terminal -------------------------------------------------------------


@pytest.mark.slow
def test_memory_text_reaches_the_terminal_escaped_and_json_equal(
    sandbox: Sandbox,
) -> None:
    red = _remember(
        sandbox,
        title=HOSTILE_TITLE,
        content="Colours the terminal red.",
        tags=["paint\u202e"],
    )
    flipped = _remember(sandbox, title="abc\u202eevil\u2066", content="Flips the words.")
    env = sandbox.environ()
    listed = run_cli(["memory", "list", "project"], env)
    assert listed.returncode == 0
    assert sorted(listed.stdout.splitlines()) == sorted(
        [
            f"{_path(red)}  active  decision  {HOSTILE_SHOWN}",
            f"{_path(flipped)}  active  decision  abc\\u202eevil\\u2066",
        ]
    )
    found = run_cli(["memory", "search", "project", "terminal red"], env)
    assert found.stdout.splitlines() == [
        _path(red),
        f"  {HOSTILE_SHOWN}  [matched: red, terminal]",
    ]
    # JSON output reads as exactly the same value (what the file holds, what a tool
    # answers), with the invisible characters inside its strings written as escapes.
    file = sandbox.memory_root / _path(red)
    body = json.loads(file.read_bytes())
    shown = run_cli(["memory", "show", _path(red)], env).stdout
    assert json.loads(shown) == body
    assert "\\u202e" in shown
    exported = run_cli(["memory", "export", "project"], env).stdout
    as_json = run_cli(["memory", "list", "project", "--json"], env).stdout
    assert body in [json.loads(line) for line in exported.splitlines()]
    assert {json.loads(line)["title"] for line in as_json.splitlines()} == {
        HOSTILE_TITLE,
        "abc\u202eevil\u2066",
    }
    for output in (shown, exported, as_json):
        assert not any(unicodedata.category(char) in ESCAPED - {"Cc"} for char in output)
        assert not any(unicodedata.category(char) == "Cc" and char != "\n" for char in output)


@pytest.mark.slow
def test_check_and_stats_escape_the_names_of_files_and_directories(sandbox: Sandbox) -> None:
    root = sandbox.memory_root
    _remember(sandbox, title="Kept", content="The one good record.")
    evil = "evil\x1b[2J\u202e"
    (root / "project" / evil).mkdir(mode=0o700)
    (root / "project" / evil / "notes.json").write_text("{broken")
    env = sandbox.environ()
    checked = run_cli(["memory", "check"], env)
    assert checked.returncode == 1
    parts = ("project", evil, "notes.json")
    assert checked.stdout.splitlines()[2] == (
        f"{root}/project/evil\\x1b[2J\\u202e/notes.json: not valid JSON (or repeats a key) "
        f"(reason=invalid_json, file={sandbox.file_id(parts)})"
    )
    stats = run_cli(["memory", "stats"], env)
    assert [line.split()[:3] for line in stats.stdout.splitlines()[2:4]] == [
        ["project", "/", "evil\\x1b[2J\\u202e"],
        ["project", "/", "mymcp"],
    ]
    assert not _holds_escaped(checked.stdout + stats.stdout)


def _holds_escaped(text: str) -> bool:
    lines = text.split("\n")  # the line breaks the commands print are their own
    return any(unicodedata.category(char) in ESCAPED for line in lines for char in line)


# -- stats counts what check names ----------------------------------------------------------


@pytest.mark.slow
def test_stats_counts_every_file_check_names(sandbox: Sandbox, tmp_path: Path) -> None:
    record = _remember(sandbox, title="Kept", content="The one good record.")
    root = sandbox.memory_root
    good = root / _path(record)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(good.read_bytes())
    (good.parent / "mem_0123456789abcdef0123456789abcdef.json").symlink_to(elsewhere)
    env = sandbox.environ()
    stats = json.loads(run_cli(["memory", "stats", "--json"], env).stdout)
    assert stats["scopes"] == {
        "project": {
            "mymcp": {
                "active": 1,
                "archived": 0,
                "legacy": 0,
                "skipped": 1,
                "bytes": good.stat().st_size,
            }
        }
    }
    checked = run_cli(["memory", "check"], env)
    assert checked.stdout.splitlines()[-1] == "memory check: 1 problem(s)"
    whole = run_cli(["check"], env)
    assert "Mnemosyne skips files under the memory root: 1 file(s)" in whole.stderr
    # Links and files too deep are never read, so only the problems hold them; files
    # straight in the scope count under "-".
    (root / "project" / "link.json").symlink_to(elsewhere)
    deep = root / "project" / "mymcp" / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True, mode=0o700)
    (deep / "deep.json").write_bytes(good.read_bytes())
    (root / "project" / "mymcp" / "fields.json").write_text('{"title": "no record"}')
    stats = json.loads(run_cli(["memory", "stats", "--json"], env).stdout)
    skipped = {name: counts["skipped"] for name, counts in stats["scopes"]["project"].items()}
    assert skipped == {"-": 1, "mymcp": 3}
    checked = run_cli(["memory", "check"], env)
    assert checked.stdout.splitlines()[-1] == "memory check: 4 problem(s)"
    table = run_cli(["memory", "stats"], env).stdout.splitlines()
    assert table[-1].split()[:5] == ["total", "1", "0", "0", "4"]
    # A namespace directory the server does not trust counts under its own name.
    shared = root / "project" / "shared"
    shared.mkdir(mode=0o700)
    shared.chmod(0o775)
    stats = json.loads(run_cli(["memory", "stats", "--json"], env).stdout)
    skipped = {name: counts["skipped"] for name, counts in stats["scopes"]["project"].items()}
    assert skipped == {"-": 1, "mymcp": 3, "shared": 1}


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root (and setpriv) to run the command as a user a directory shuts out",
)
def test_a_scope_directory_the_user_may_not_read_is_named_and_stats_counts_the_rest() -> None:
    nobody = 65534
    as_nobody = ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups"]
    importable = subprocess.run(
        [*as_nobody, sys.executable, "-c", "import mymcp"],
        capture_output=True,
        timeout=60,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "HOME": "/"},
    )
    if importable.returncode != 0:
        # A checkout in a directory of mode 0700 (mktemp -d) is closed to that user.
        pytest.skip("another user cannot import mymcp from this checkout")
    base = Path(tempfile.mkdtemp())
    try:
        root = base / "memory"
        (root / "project").mkdir(parents=True, mode=0o700)
        for path in (base, root, root / "project"):
            os.chown(path, nobody, nobody)
        (root / "project").chmod(0o300)  # enterable and writable, never listed
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(base),
            **{
                f"XDG_{kind}_HOME": str(base / kind.lower())
                for kind in ("CONFIG", "CACHE", "STATE")
            },
            "MNEMOSYNE_MEMORY_ROOT": str(root),
        }
        named = (
            f"mymcp: error: {root / 'project'}: Mnemosyne cannot read a scope: "
            f"{PROBLEM_TEXT['scope_unavailable']} (code=memory_scope_unavailable)"
        )
        for command in (["stats"], ["list", "project"], ["search", "project", "x"]):
            ran = subprocess.run(
                [*as_nobody, sys.executable, "-m", "mymcp", "memory", *command],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert ran.returncode == 1, (command, ran.stderr)
            assert ran.stderr.splitlines()[-1] == named, command
            if command == ["stats"]:  # the table is still printed, the scope counted apart
                assert ran.stdout.splitlines()[-1].split()[:5] == ["total", "0", "0", "0", "1"]
    finally:
        (base / "memory" / "project").chmod(0o700)
        shutil.rmtree(base)


@pytest.mark.slow
def test_stats_names_a_scope_that_is_no_directory_as_the_other_commands_do(
    sandbox: Sandbox,
) -> None:
    # One scope's entry being a file must not hide the rest: stats counts the scopes it
    # can read, names the one it cannot exactly as `list` does, and fails.
    _remember(sandbox, title="Kept", content="The one good record.")
    blocked = sandbox.memory_root / "self"
    blocked.write_text("x")
    blocked.chmod(0o600)
    env = sandbox.environ()
    listed = run_cli(["memory", "list", "self"], env)
    assert (listed.returncode, listed.stderr) == (
        1,
        f"mymcp: error: {blocked}: Mnemosyne cannot read a scope: "
        f"{PROBLEM_TEXT['scope_unavailable']} (code=memory_scope_unavailable)\n",
    )
    stats = run_cli(["memory", "stats"], env)
    assert (stats.returncode, stats.stderr) == (1, listed.stderr)
    assert [line.split()[:7] for line in stats.stdout.splitlines()[2:-1]] == [
        ["self", "/", "-", "0", "0", "0", "1"],
        ["project", "/", "mymcp", "1", "0", "0", "0"],
    ]
    assert stats.stdout.splitlines()[-1].split()[:5] == ["total", "1", "0", "0", "1"]
    as_json = run_cli(["memory", "stats", "--json"], env)
    assert (as_json.returncode, as_json.stderr) == (1, listed.stderr)
    report = json.loads(as_json.stdout)
    assert report["unavailable"] == ["self"]
    assert report["scopes"]["self"] == {
        "-": {"active": 0, "archived": 0, "legacy": 0, "skipped": 1, "bytes": 0}
    }
    assert report["scopes"]["project"]["mymcp"]["active"] == 1
    # The skipped total is still what `memory check` counts.
    checked = run_cli(["memory", "check"], env)
    assert checked.stdout.splitlines()[-1] == "memory check: 1 problem(s)"
    blocked.unlink()
    fine = run_cli(["memory", "stats", "--json"], env)
    assert (fine.returncode, json.loads(fine.stdout)["unavailable"]) == (0, [])


def test_the_stats_table_keeps_its_columns_whatever_the_names(sandbox: Sandbox) -> None:
    _remember(sandbox, title="Kept", content="The one good record.")
    for name in ("日本", "ns\x07", "plain"):
        folder = sandbox.memory_root / "project" / name
        folder.mkdir(mode=0o700)
        (folder / "a.json").write_text("{broken")
    table = run_cli(["memory", "stats"], sandbox.environ()).stdout.splitlines()[1:]
    widths = {
        sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in line)
        for line in table
    }
    assert len(widths) == 1, table  # every line as wide as the header: columns line up
    assert any("ns\\x07" in line for line in table)  # shown escaped


def test_stats_json_keeps_accented_letters_readable(sandbox: Sandbox, tmp_path: Path) -> None:
    root = tmp_path / "mémoire"
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(root)})
    _remember(sandbox, title="Kept", content="The one good record.")
    report = run_cli(["memory", "stats", "--json"], env)
    assert report.returncode == 0, report.stderr
    assert f'"root": "{root}"' in report.stdout  # not "m\u00e9moire"
    assert json.loads(report.stdout)["root"] == str(root)


# -- import: what a dry run predicts, and what is in the way --------------------------------


_RECORD: dict[str, Any] = {
    "scope": "project",
    "namespace": {"kind": "project", "id": "mymcp", "label": None},
    "collection": None,
    "kind": "decision",
    "language": "en",
    "title": "Loopback only",
    "content": "The server binds to loopback only.",
    "tags": [],
    "provenance": {"origin": "explicit_user_statement", "recorded_via": "memory_remember"},
}


def _record(title: str, namespace: str = "mymcp", **extra: Any) -> dict[str, Any]:
    """An active project decision as `memory export` writes its fields to import."""
    return {
        **_RECORD,
        "namespace": {"kind": "project", "id": namespace, "label": None},
        "title": title,
        "content": f"The decision called {title}.",
        **extra,
    }


def _utc_now() -> str:
    """Now, as records write their times (whole seconds, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _as_applied(lines: list[str]) -> list[str]:
    """A dry run's report as `--apply` words it, ids aside: the ids are drawn on writing,
    and a repeat of an earlier line is found on disk, not in the file."""
    return [
        line.replace(": would_remember: ", ": remembered: ").removesuffix(
            " (an earlier line of this file)"
        )
        for line in _without_ids(lines)
    ]


def _without_ids(lines: list[str]) -> list[str]:
    return [re.sub(r"mem_[0-9a-f]{32}\.json", "<new id>.json", line) for line in lines]


@pytest.mark.slow
def test_a_dry_run_stops_at_the_candidate_limit_where_apply_does(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    dump = tmp_path / "three.jsonl"
    records = [_record("First"), _record("Second"), _record("Third"), _record("First")]
    dump.write_text("".join(json.dumps(record) + "\n" for record in records))
    env = sandbox.environ(
        {
            "MNEMOSYNE_MEMORY_ROOT": str(tmp_path / "empty-root"),
            "MNEMOSYNE_MEMORY_CANDIDATE_LIMIT": "2",
        }
    )
    rehearsed = run_cli(["memory", "import", str(dump)], env)
    applied = run_cli(["memory", "import", str(dump), "--apply"], env)
    full = (
        "candidate_limit_exceeded: the scope already holds 2 candidate files, the candidate "
        "limit, and no memory is added past it; the operator raises it with [memory] "
        "candidate_limit in ~/.mnemosyne/config.toml or MNEMOSYNE_MEMORY_CANDIDATE_LIMIT "
        "(at most 1000000)"
    )
    where = "project/mymcp/<new id>.json"
    assert rehearsed.stdout.splitlines() == [
        f"{dump}:1: would_remember: {where}",
        f"{dump}:2: would_remember: {where}",
        f"{dump}:3: {full}",
        # A repeat is found before the scope is counted, with --apply as in the dry run.
        f"{dump}:4: already_exists: {where} (an earlier line of this file)",
        "would remember 2, already present 1, left out 0, invalid 1 "
        "(dry run: add --apply to write)",
    ]
    assert _without_ids(applied.stdout.splitlines()[:-1]) == _as_applied(
        rehearsed.stdout.splitlines()[:-1]
    )
    assert applied.stdout.splitlines()[-1] == (
        "remembered 2, already present 1, left out 0, invalid 1"
    )
    assert rehearsed.returncode == applied.returncode == 1


@pytest.mark.slow
def test_an_import_makes_new_memories_of_what_the_export_holds(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    # What the export/import section of OPERATIONS.md says an import keeps and drops.
    _remember(sandbox, title="Loopback only", content="The server binds to loopback only.")
    exported = json.loads(run_cli(["memory", "export", "project"], sandbox.environ()).stdout)
    old = {**exported, "created_at": "2020-01-01T00:00:00Z", "updated_at": "2020-01-02T00:00:00Z"}
    old["lifecycle"] = {"state": "active", "revision": 7}
    unknown = {**old, "title": "Unknown field", "surprise": {"kept": False}}
    without = {key: value for key, value in old.items() if key != "lifecycle"}
    lines = [
        old,
        unknown,
        {**without, "title": "No lifecycle"},
        {**old, "title": "Null lifecycle", "lifecycle": None},
        {**old, "title": "Empty lifecycle", "lifecycle": {}},
        {**old, "title": "Archived", "lifecycle": {"state": "archived", "revision": 2}},
    ]
    dump = tmp_path / "round-trip.jsonl"
    dump.write_text("".join(json.dumps(line) + "\n" for line in lines))
    other = tmp_path / "other-root"
    started = _utc_now()
    applied = run_cli(
        ["memory", "import", str(dump), "--apply"],
        sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(other)}),
    )
    ended = _utc_now()
    assert applied.stdout.splitlines()[-1] == (
        "remembered 4, already present 0, left out 1, invalid 1"
    )
    assert f"{dump}:5: invalid_record (lifecycle.state): lifecycle has no state" in applied.stdout
    written = {
        body["title"]: body
        for body in (json.loads(path.read_text()) for path in other.rglob("*.json"))
    }
    assert sorted(written) == ["Loopback only", "No lifecycle", "Null lifecycle", "Unknown field"]
    for body in written.values():
        assert body["id"] != exported["id"]
        assert started <= body["created_at"] == body["updated_at"] <= ended
        assert body["lifecycle"] == {"state": "active", "revision": 1}
        origin = exported["provenance"]["origin"]
        assert body["provenance"] == {"origin": origin, "recorded_via": "import"}
        assert "surprise" not in body
        kept = ("scope", "namespace", "collection", "kind", "language", "content", "tags")
        assert {key: body[key] for key in kept} == {key: exported[key] for key in kept}


@pytest.mark.slow
def test_import_names_what_is_in_the_way_of_a_record_as_check_does(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    root = tmp_path / "other-root"
    (root / "project").mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    (root / "project" / "mymcp").write_text("in the way")
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (root / "project" / "other").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (root / "preference").write_text("in the way")
    secret = "Nobody may read this sentence."
    lines = [
        _record("Blocked", content=secret),
        _record("Linked", "other", content=secret),
        {
            **_record("Whole scope", content=secret),
            "scope": "preference",
            "kind": "preference",
            "namespace": {"kind": "domain", "id": "editing", "label": None},
        },
        _record("Fine", "fine", collection={"id": "c1", "label": None}),
    ]
    dump = tmp_path / "blocked.jsonl"
    dump.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(root)})
    checked = run_cli(["memory", "check"], env).stdout.splitlines()
    named = {line.split(": ", 1)[0]: line for line in checked}
    scope = run_cli(["memory", "list", "preference"], env).stderr.removeprefix("mymcp: error: ")
    unavailable = "memory_source_unavailable: "
    expected = [
        f"{dump}:1: {unavailable}{named[f'{root}/project/mymcp']}",
        f"{dump}:2: {unavailable}{named[f'{root}/project/other']}",
        f"{dump}:3: {unavailable}{scope.rstrip()}",
    ]
    rehearsed = run_cli(["memory", "import", str(dump)], env)
    applied = run_cli(["memory", "import", str(dump), "--apply"], env)
    assert rehearsed.stdout.splitlines()[:3] == applied.stdout.splitlines()[:3] == expected
    assert "(reason=not_a_directory," in expected[0]
    assert "(reason=symlink," in expected[1]
    assert "(code=memory_scope_unavailable)" in expected[2]
    assert (
        rehearsed.stdout.splitlines()[3]
        == f"{dump}:4: would_remember: project/fine/c1/<new id>.json"
    )
    assert secret not in rehearsed.stdout + rehearsed.stderr + applied.stdout + applied.stderr


@pytest.mark.slow
def test_memory_check_says_a_root_is_created_by_remember_only_when_it_can_be(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    roots = {
        tmp_path / "new" / "memory": " (absent; created by the first remember)",
        a_file / "sub": "",
        tmp_path / "dangling": "",
    }
    for root, note in roots.items():
        env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(root)})
        checked = run_cli(["memory", "check"], env)
        assert checked.stdout.splitlines()[0] == f"memory root: {root}{note}"
        assert checked.returncode == (0 if note else 1)
        whole = run_cli(["check"], env)
        assert f"memory: {root}{note}" in whole.stdout.splitlines()
        assert whole.returncode == (0 if note else 1)


def test_list_help_says_a_collection_needs_a_namespace(sandbox: Sandbox) -> None:
    # Without --namespace either option is refused (exit 2): the help must say so.
    helped = run_cli(["memory", "list", "--help"], sandbox.environ({"COLUMNS": "1000"}))
    options = {line.split()[0]: line for line in helped.stdout.splitlines() if "collection" in line}
    assert "needs --namespace" in options["--collection"]
    assert "needs --namespace" in options["--no-collection"]
    refused = run_cli(["memory", "list", "project", "--collection", "c1"], sandbox.environ())
    assert refused.returncode == 2


# -- properties ------------------------------------------------------------------------------


@contextlib.contextmanager
def _private_home(extra: dict[str, str] | None = None) -> Iterator[Path]:
    """A private HOME and memory root for in-process commands, for all examples at once;
    ``extra`` sets more variables."""
    with tempfile.TemporaryDirectory() as directory, pytest.MonkeyPatch.context() as patch:
        home = Path(directory)
        for key in list(os.environ):
            if key.startswith(("MNEMOSYNE_", "XDG_")):
                patch.delenv(key)
        patch.setenv("HOME", str(home))
        patch.setenv("XDG_CONFIG_HOME", str(home / "config"))
        patch.setenv("XDG_CACHE_HOME", str(home / "cache"))
        patch.setenv("MNEMOSYNE_MEMORY_ROOT", str(home / "memory"))
        for key, value in (extra or {}).items():
            patch.setenv(key, value)
        yield home


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
_states = st.sampled_from(["active", "archived"]) | _json_values
_lines = st.one_of(
    st.text(max_size=40),
    _json_values.map(json.dumps),
    _states.map(lambda state: json.dumps({**_RECORD, "lifecycle": {"state": state}})),
    st.integers(1, 6000).map(lambda depth: "[" * depth + "]" * depth),
    st.integers(4000, 5000).map(lambda digits: '{"title": ' + "7" * digits + "}"),
).filter(lambda line: "\n" not in line)


@settings(max_examples=60, deadline=None)
@given(st.lists(_lines, min_size=1, max_size=6))
def test_import_reports_every_line_and_nothing_else(lines: list[str]) -> None:
    """Whatever a line holds, `import` reports it by number and counts it once: a
    record with a state it knows as what that state asks, anything else as invalid."""
    with _private_home() as home:
        dump = home / "lines.jsonl"
        dump.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = cli.main(["memory", "import", str(dump)])
        assert not (home / "memory").exists()  # a dry run writes nothing
    reported = [number for number, line in enumerate(lines, 1) if line.strip()]
    output = printed.getvalue().splitlines()
    assert [int(line.split(":")[1]) for line in output[:-1]] == reported
    assert not _holds_escaped(printed.getvalue())
    counts = re.fullmatch(
        r"would remember (\d+), already present (\d+), left out (\d+), invalid (\d+) "
        r"\(dry run: add --apply to write\)",
        output[-1],
    )
    assert counts is not None
    assert sum(int(count) for count in counts.groups()) == len(reported)
    assert status == (1 if int(counts.group(4)) else 0)
    rehearsed = False  # every active line here is the same memory: only its first is new
    for line, said in zip([line for line in lines if line.strip()], output[:-1], strict=True):
        state = _state_of(line)
        if state == "active":
            where = "project/mymcp/<new id>.json"
            expected = (
                f": already_exists: {where} (an earlier line of this file)"
                if rehearsed
                else f": would_remember: {where}"
            )
            assert said.endswith(expected), said
            rehearsed = True
        elif state == "archived":
            assert said.endswith(": archived: left out (import brings in active memories only)")
        elif state is not None:
            assert "invalid_record (lifecycle" in said, said


def _state_of(line: str) -> object:
    """The lifecycle state of a generated record line; None for any other line."""
    try:
        document = load_strict_json(line)
    except StrictJsonError:
        return None
    if not isinstance(document, dict) or document.keys() != {*_RECORD, "lifecycle"}:
        return None
    if document != {**_RECORD, "lifecycle": document["lifecycle"]}:
        return None
    state: object = document["lifecycle"]["state"]
    return "invalid" if state not in ("active", "archived") else state


_Line = tuple[str, str, dict[str, str] | None]
# Lines that try each way a dry run could part from `--apply`: a repeat of a memory the
# root holds or of an earlier line, a scope filled up, a file in a record's way. Two
# scopes, three namespaces in one (one with a file in its place), two titles, three states.
_import_lines = st.lists(
    st.tuples(
        st.sampled_from(["mymcp", "other", "blocked", "preference"]),
        st.sampled_from(["First", "Second"]),
        st.sampled_from([{"state": "active"}, {"state": "archived"}, None]),
    ),
    max_size=7,
)


def _import_line(place: str, title: str, lifecycle: dict[str, str] | None) -> str:
    record = _record(title, place)
    if place == "preference":
        namespace = {"kind": "domain", "id": "editing", "label": None}
        record = {**record, "scope": "preference", "kind": "preference", "namespace": namespace}
    if lifecycle is not None:
        record["lifecycle"] = lifecycle
    return json.dumps(record) + "\n"


def _run(arguments: list[str]) -> tuple[int, list[str]]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        status = cli.main(arguments)
    return status, printed.getvalue().splitlines()


@settings(max_examples=40, deadline=None)
@given(limit=st.integers(1, 3), held=_import_lines, lines=_import_lines)
# A full scope is refused before a file in the way is met; the root's own memories and
# the file's earlier lines fill a scope together.
@example(limit=1, held=[], lines=[("mymcp", "First", None), ("blocked", "Second", None)])
@example(
    limit=2,
    held=[("mymcp", "First", None)],
    lines=[
        ("mymcp", "First", None),
        ("preference", "First", None),
        ("other", "Second", None),
        ("mymcp", "Second", None),
        ("preference", "Second", None),
    ],
)
def test_a_dry_run_reports_line_for_line_what_apply_then_does(
    limit: int, held: list[_Line], lines: list[_Line]
) -> None:
    """Over a root that already holds some memories, a dry run says of every line what
    `--apply` then does: remembered, found (on disk or earlier in the file), left out,
    refused for a full scope or for a file in the way."""
    with _private_home({"MNEMOSYNE_MEMORY_CANDIDATE_LIMIT": str(limit)}) as home:
        (home / "memory" / "project").mkdir(parents=True, mode=0o700)
        (home / "memory").chmod(0o700)
        (home / "memory" / "project" / "blocked").write_text("in the way")
        before, dump = home / "held.jsonl", home / "lines.jsonl"
        before.write_text("".join(_import_line(*line) for line in held))
        dump.write_text("".join(_import_line(*line) for line in lines))
        _run(["memory", "import", str(before), "--apply"])
        rehearsed, predicted = _run(["memory", "import", str(dump)])
        applied, reported = _run(["memory", "import", str(dump), "--apply"])
    assert _without_ids(reported[:-1]) == _as_applied(predicted[:-1])
    assert rehearsed == applied
    assert reported[-1] + " (dry run: add --apply to write)" == predicted[-1].replace(
        "would remember", "remembered"
    )


def test_an_import_stops_where_another_writer_keeps_the_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A held lock is no fault of the file: the import says where it stopped and how to
    # go on, instead of counting the line invalid and waiting again for every later one.
    import fcntl
    import types

    from mymcp.plugins.mnemosyne.memory import store as store_module

    clock = [0.0]

    def sleep(seconds: float) -> None:  # the lock's poll, on a clock of the test's own
        clock[0] += seconds

    fake = types.SimpleNamespace(monotonic=lambda: clock[0], sleep=sleep)
    monkeypatch.setattr(store_module, "time", fake)
    with _private_home() as home:
        dump = home / "two.jsonl"
        lines = [_import_line("mymcp", title, None) for title in ("First", "Second")]
        dump.write_text("".join(lines))
        root = home / "memory"
        root.mkdir(mode=0o700)
        holder = os.open(root / ".mnemosyne.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(holder, fcntl.LOCK_EX)  # another process's write, as the lock sees it
            status, output = _run(["memory", "import", str(dump), "--apply"])
        finally:
            os.close(holder)
        assert sorted(path.name for path in root.rglob("*.json")) == []
    assert status == 1
    assert re.fullmatch(r".*two\.jsonl:1: memory_busy: another writer holds the .+", output[0])
    assert output[1].startswith("stopped at line 1: another writer held the memory lock")
    assert output[2] == "remembered 0, already present 0, left out 0, invalid 0"
    assert len(output) == 3  # the second line was not tried
    assert clock[0] >= 5.0  # it did wait the usual time first


def test_reading_a_root_others_may_write_to_warns_as_the_server_does(sandbox: Sandbox) -> None:
    # Read all the same (the server serves it too), but never silently: what such a root
    # holds may not all be its user's. `check` fails on it and an import refuses it.
    _remember(sandbox, title="Loopback only", content="The server binds to loopback only.")
    root = Path(sandbox.memory_root)
    root.chmod(0o777)
    try:
        warning = (
            f"mymcp: warning: {root}: Mnemosyne memory root is writable by others: mode 0777; "
            f"run: chmod go-w {root} (code=memory_root_unsafe_permissions)\n"
        )
        for command in (["list", "project"], ["export", "project"], ["stats"]):
            read = run_cli(["memory", *command], sandbox.environ())
            assert read.returncode == 0, read.stderr
            assert read.stderr.startswith(warning)
            assert read.stdout
        checked = run_cli(["memory", "check"], sandbox.environ())
        assert checked.returncode == 1
    finally:
        root.chmod(0o700)
    quiet = run_cli(["memory", "list", "project"], sandbox.environ())
    assert quiet.returncode == 0
    assert "warning" not in quiet.stderr

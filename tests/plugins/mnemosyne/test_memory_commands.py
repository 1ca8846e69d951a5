"""`mymcp memory …` against hostile input: lines `import` cannot take, arguments `show`
and `import` cannot use, memory text that would drive the terminal, and files `stats`
must count as `check` does.

Like the other tests of these commands (tests/e2e/test_memory_cli_e2e.py), they run the
real `mymcp` in a private HOME; the two properties run the filter itself and `import`
in process, over generated input.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mymcp import cli
from mymcp._strictjson import StrictJsonError, load_strict_json
from mymcp.plugins.mnemosyne._memory_check import PROBLEM_TEXT
from mymcp.plugins.mnemosyne.memory import file_id
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
    root: Path, relative: str, shown: str | None = None, reason: str = "unreadable"
) -> str:
    parts = tuple(relative.split("/"))
    return (
        f"mymcp: error: {root}/{shown or relative}: {PROBLEM_TEXT[reason]} (reason={reason}, "
        f"file={file_id(parts)})\n"
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
        f"{dump}:1: {state}; got 'zombie'",
        f"{dump}:2: {state}; got 'Active'",
        f"{dump}:3: {state}; got None",
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
        long: _unreadable(root, long, "a" * 200 + "..."),  # ENAMETOOLONG, also in the cwd
        "/" + long: f"mymcp: error: /{'a' * 199}... is not under the memory root {root}\n",
        f"{_path(record)}/x.json": _unreadable(root, f"{_path(record)}/x.json"),  # ENOTDIR
        "loop/x.json": _unreadable(root, "loop/x.json", reason="symlink"),  # never entered
        '{"a":' * 3000: NOT_A_REFERENCE + "\n",
        '{"schema_version": ' + "9" * 5000 + "}": NOT_A_REFERENCE + "\n",
        '{"schema_version": NaN}': NOT_A_REFERENCE + "\n",
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
    assert shown.stderr == _unreadable(root, relative, reason="symlink")


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
    assert shown.stderr == _unreadable(root, _path(record), reason="unsafe_permissions")
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
        f"(reason=invalid_json, file={file_id(parts)})"
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


# -- properties ------------------------------------------------------------------------------


@contextlib.contextmanager
def _private_home() -> Iterator[Path]:
    """A private HOME and memory root for in-process commands, for all examples at once."""
    with tempfile.TemporaryDirectory() as directory, pytest.MonkeyPatch.context() as patch:
        home = Path(directory)
        for key in list(os.environ):
            if key.startswith(("MNEMOSYNE_", "XDG_")):
                patch.delenv(key)
        patch.setenv("HOME", str(home))
        patch.setenv("XDG_CONFIG_HOME", str(home / "config"))
        patch.setenv("XDG_CACHE_HOME", str(home / "cache"))
        patch.setenv("MNEMOSYNE_MEMORY_ROOT", str(home / "memory"))
        yield home


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

"""`mymcp memory …` and the memory part of `mymcp check`, through the real `mymcp` in a
private HOME; and the server's one warning per broken file per change."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mymcp.plugins.mnemosyne import MnemosyneSettings, create_mnemosyne
from mymcp.plugins.mnemosyne._memory_check import PROBLEM_TEXT
from tests.e2e.server import MYMCP, Sandbox, log_and_errors, run_cli, serve

pytestmark = pytest.mark.slow

PROJECT = {"kind": "project", "id": "mymcp", "label": "MyMCP"}

UNSAFE = "writable by group or others, or owned by another user"


def _remember(sandbox: Sandbox, **arguments: Any) -> dict[str, Any]:
    plugin = create_mnemosyne(MnemosyneSettings(), environ={"HOME": str(sandbox.home)})
    arguments.setdefault("collection", None)
    arguments.setdefault("language", "en")
    arguments.setdefault("origin", "explicit_user_statement")
    arguments.setdefault("tags", [])
    try:
        answer: dict[str, Any] = plugin.mutations.remember(arguments).payload
    finally:
        # Closed now, not when the test process exits, long after the sandbox is gone.
        plugin.close()
    assert answer["status"] == "remembered", answer
    return answer


@pytest.fixture
def memory(sandbox: Sandbox) -> dict[str, Any]:
    """Two project decisions, an editor preference and one hand-broken file."""
    made = {
        "timestamps": _remember(
            sandbox,
            scope="project",
            namespace=PROJECT,
            kind="decision",
            title="Logs carry UTC timestamps",
            content="Every log line starts with a UTC timestamp.",
            tags=["logging"],
        ),
        "loopback": _remember(
            sandbox,
            scope="project",
            namespace=PROJECT,
            kind="constraint",
            title="Loopback only",
            content="The server binds to loopback only.",
        ),
        "editor": _remember(
            sandbox,
            scope="preference",
            namespace={"kind": "domain", "id": "editing", "label": None},
            kind="preference",
            title="Editor",
            content="Prefers Helix as the text editor.",
            tags=["editor"],
        ),
    }
    (sandbox.memory_root / "project" / "mymcp" / "notes.json").write_text('{"title": "half')
    return made


def _path(answer: dict[str, Any]) -> str:
    reference = answer["reference"]
    return f"{reference['scope']}/{reference['namespace_id']}/{reference['id']}.json"


def test_list_show_and_search(sandbox: Sandbox, memory: dict[str, Any]) -> None:
    env = sandbox.environ()
    listed = run_cli(["memory", "list", "project"], env)
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.splitlines()) == sorted(
        [
            f"{_path(memory['timestamps'])}  active  decision  Logs carry UTC timestamps",
            f"{_path(memory['loopback'])}  active  constraint  Loopback only",
        ]
    )
    as_json = run_cli(["memory", "list", "project", "--namespace", "mymcp", "--json"], env)
    assert {json.loads(line)["title"] for line in as_json.stdout.splitlines()} == {
        "Logs carry UTC timestamps",
        "Loopback only",
    }
    outside = run_cli(["memory", "list", "project", "--namespace", "mymcp", "--no-collection"], env)
    assert len(outside.stdout.splitlines()) == 2
    assert listed.stderr.splitlines()[-1] == outside.stderr.splitlines()[-1] == "2 memories"
    inside = run_cli(
        ["memory", "list", "project", "--namespace", "mymcp", "--collection", "x"], env
    )
    assert (inside.returncode, inside.stdout) == (0, "")
    unknown = run_cli(["memory", "list", "projects"], env)
    assert (unknown.returncode, unknown.stderr) == (
        2,
        "mymcp: error: SCOPE must be one of: self, relationship, preference, practice, "
        "project, knowledge, agent\n",
    )
    loose = run_cli(["memory", "list", "project", "--collection", "x"], env)
    assert loose.returncode == 2
    assert "need --namespace" in loose.stderr
    # `show` takes a path as `list` prints it, a file path, or a reference.
    shown = run_cli(["memory", "show", _path(memory["editor"])], env)
    assert json.loads(shown.stdout)["content"] == "Prefers Helix as the text editor."
    by_file = run_cli(["memory", "show", str(sandbox.memory_root / _path(memory["editor"]))], env)
    assert by_file.stdout == shown.stdout
    reference = json.dumps(memory["editor"]["reference"])
    inspected = run_cli(["memory", "show", reference], env)
    assert json.loads(inspected.stdout)["memory"]["title"] == "Editor"
    broken = run_cli(["memory", "show", "project/mymcp/notes.json"], env)
    assert broken.returncode == 1
    assert broken.stderr == (
        f"mymcp: error: {sandbox.memory_root}/project/mymcp/notes.json: not valid JSON (or "
        "repeats a key) (reason=invalid_json, "
        f"file={sandbox.file_id(('project', 'mymcp', 'notes.json'))})\n"
    )
    found = run_cli(["memory", "search", "preference", "which editor"], env)
    assert found.stdout.splitlines() == [_path(memory["editor"]), "  Editor  [matched: editor]"]
    tagged = run_cli(["memory", "search", "project", "server", "--tags", "logging", "--json"], env)
    answer = json.loads(tagged.stdout)
    assert answer["memories"][0]["title"] == "Logs carry UTC timestamps"
    assert answer["memories"][0]["match"]["tags"] == ["logging"]


def test_stats_and_check_name_every_broken_file(sandbox: Sandbox, memory: dict[str, Any]) -> None:
    env = sandbox.environ()
    stats = json.loads(run_cli(["memory", "stats", "--json"], env).stdout)
    assert stats["scopes"]["project"]["mymcp"]["active"] == 2
    assert stats["scopes"]["project"]["mymcp"]["skipped"] == 1
    assert stats["scopes"]["preference"]["editing"]["active"] == 1
    (sandbox.memory_root / "project" / "loose").mkdir(mode=0o777)
    os.chmod(sandbox.memory_root / "project" / "loose", 0o777)  # noqa: S103 - under test
    checked = run_cli(["memory", "check"], env)
    assert checked.returncode == 1
    root = sandbox.memory_root
    assert checked.stdout.splitlines() == [
        f"memory root: {root}",
        "records: 4 candidate files; largest scope project holds 3 (candidate limit 200000)",
        f"{root}/project/loose: {UNSAFE} (reason=unsafe_permissions, "
        f"file={sandbox.file_id(('project', 'loose'))})",
        f"{root}/project/mymcp/notes.json: not valid JSON (or repeats a key) "
        f"(reason=invalid_json, file={sandbox.file_id(('project', 'mymcp', 'notes.json'))})",
        "memory check: 2 problem(s)",
    ]


def test_check_summarises_memory_and_fails_on_a_scope_over_the_limit(
    sandbox: Sandbox, memory: dict[str, Any]
) -> None:
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table())
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 0, checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[-2:] == [
        f"memory: {sandbox.memory_root} (4 files; largest scope project holds 3 of the "
        "candidate limit 200000)",
        "mymcp: check OK",
    ]
    _, said = log_and_errors(checked.stderr)
    warnings = [line for line in checked.stderr.splitlines() if line.startswith("mymcp: warning")]
    assert said == []
    assert warnings == [
        f"mymcp: warning: {sandbox.memory_root}: Mnemosyne skips files under the memory root: "
        "1 file(s); `mymcp memory check` names each and why (code=memory_files_skipped)"
    ]
    small = run_cli(["check"], sandbox.environ({"MNEMOSYNE_MEMORY_CANDIDATE_LIMIT": "2"}))
    assert small.returncode == 1
    assert (
        f"mymcp: error: {sandbox.memory_root}/project: Mnemosyne scope holds more files than "
        "the candidate limit: 3 files, limit 2: reads of the scope fail; raise [memory] "
        "candidate_limit in ~/.mnemosyne/config.toml or MNEMOSYNE_MEMORY_CANDIDATE_LIMIT "
        "(code=candidate_limit_exceeded)"
    ) in small.stderr.splitlines()
    os.chmod(sandbox.memory_root, 0o777)  # noqa: S103 - under test
    unsafe = run_cli(["check"], sandbox.environ())
    assert unsafe.returncode == 1
    assert "(code=memory_root_unsafe_permissions)" in unsafe.stderr
    relative = run_cli(["check"], sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": "memory"}))
    assert relative.returncode == 1
    assert (
        "mymcp: error: $MNEMOSYNE_MEMORY_ROOT: Mnemosyne setting in the environment is "
        "invalid: 'memory' is a relative path, which depends on the directory the server "
        "starts in; give an absolute one (code=invalid_environment)"
    ) in relative.stderr.splitlines()
    # The server refuses it the same way, before anything is written there.
    started = run_cli(["stdio"], sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": "memory"}))
    assert started.returncode == 1
    assert "'memory' is a relative path" in started.stderr


def test_summary_lines_count_in_words(sandbox: Sandbox, memory: dict[str, Any]) -> None:
    (sandbox.memory_root / _path(memory["loopback"])).unlink()
    env = sandbox.environ()
    assert run_cli(["memory", "list", "project"], env).stderr.splitlines()[-1] == "1 memory"
    exported = run_cli(["memory", "export", "project"], env)
    assert exported.stderr.splitlines()[-1] == "exported 1 record"
    assert run_cli(["memory", "list", "self"], env).stderr.splitlines()[-1] == "0 memories"


def test_export_then_import_is_a_dry_run_until_applied_and_never_overwrites(
    sandbox: Sandbox, memory: dict[str, Any], tmp_path: Path
) -> None:
    exported = run_cli(["memory", "export", "project"], sandbox.environ())
    # The broken file is logged as the server would log it, by id; the records are output.
    assert exported.stderr.splitlines()[-1] == "exported 2 records"
    assert "reason=invalid_json" in exported.stderr
    dump = tmp_path / "project.jsonl"
    dump.write_text(exported.stdout + '{"scope": "nowhere"}\n')
    other = tmp_path / "other-root"
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(other)})
    rehearsed = run_cli(["memory", "import", str(dump)], env)
    assert rehearsed.returncode == 1  # one invalid line
    assert not other.exists()  # a dry run writes nothing, not even the root
    assert re.search(r":3: invalid_scope \(scope\): ", rehearsed.stdout)
    assert rehearsed.stdout.splitlines()[-1] == (
        "would remember 2, already present 0, left out 0, invalid 1 (dry run: add --apply to write)"
    )
    dump.write_text(exported.stdout)
    applied = run_cli(["memory", "import", str(dump), "--apply"], env)
    assert applied.returncode == 0, applied.stdout
    assert applied.stdout.splitlines()[-1] == (
        "remembered 2, already present 0, left out 0, invalid 0"
    )
    files = sorted(other.rglob("*.json"))
    assert len(files) == 2
    before = {path: path.read_bytes() for path in files}
    again = run_cli(["memory", "import", str(dump), "--apply"], env)
    assert again.stdout.splitlines()[-1] == (
        "remembered 0, already present 2, left out 0, invalid 0"
    )
    assert {path: path.read_bytes() for path in sorted(other.rglob("*.json"))} == before


def _exported_project(sandbox: Sandbox, tmp_path: Path) -> Path:
    """The project scope as `memory export` writes it, in a file to import."""
    dump = tmp_path / "project.jsonl"
    dump.write_text(run_cli(["memory", "export", "project"], sandbox.environ()).stdout)
    return dump


def test_an_import_keeps_every_origin_a_record_may_have_and_says_it_was_imported(
    sandbox: Sandbox, memory: dict[str, Any], tmp_path: Path
) -> None:
    # A memory written by hand is `manual`: a backup made with export must bring it
    # back too, though no agent may claim that origin through memory_remember.
    dump = _exported_project(sandbox, tmp_path)
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    origins = ["manual", "import", "explicit_user_statement"][: len(lines)]
    for line, origin in zip(lines, origins, strict=False):
        line["provenance"] = {"origin": origin, "recorded_via": "filesystem"}
    dump.write_text("".join(json.dumps(line) + "\n" for line in lines))
    other = tmp_path / "other-root"
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(other)})
    applied = run_cli(["memory", "import", str(dump), "--apply"], env)
    assert applied.returncode == 0, applied.stdout
    written = [json.loads(path.read_text()) for path in sorted(other.rglob("*.json"))]
    assert sorted(record["provenance"]["origin"] for record in written) == sorted(
        origins[: len(lines)]
    )
    assert {record["provenance"]["recorded_via"] for record in written} == {"import"}
    # An origin the record format does not have is still refused, line by line.
    lines[0]["provenance"] = {"origin": "agent_guess", "recorded_via": "filesystem"}
    dump.write_text(json.dumps(lines[0]) + "\n")
    refused = run_cli(["memory", "import", str(dump)], env)
    assert refused.returncode == 1
    assert (
        ":1: invalid_origin (provenance.origin): origin must be one of explicit_user_statement, "
        "user_approved_proposal, manual, import"
    ) in refused.stdout


def test_an_import_rehearsal_fails_where_the_write_would(
    sandbox: Sandbox, memory: dict[str, Any], tmp_path: Path
) -> None:
    dump = _exported_project(sandbox, tmp_path)
    first = json.loads(dump.read_text().splitlines()[0])
    other = tmp_path / "other-root"
    other.mkdir(mode=0o700)
    (other / "project").mkdir(mode=0o700)
    # A file where the records' namespace directory would be: no write can go there.
    (other / "project" / first["namespace"]["id"]).write_text("in the way")
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(other)})
    rehearsed = run_cli(["memory", "import", str(dump)], env)
    applied = run_cli(["memory", "import", str(dump), "--apply"], env)
    assert rehearsed.returncode == applied.returncode == 1
    # The line names what is in the way, as `memory check` does.
    namespace = ("project", first["namespace"]["id"])
    failure = (
        f"{dump}:1: memory_source_unavailable: {other.joinpath(*namespace)}: "
        f"{PROBLEM_TEXT['not_a_directory']} "
        f"(reason=not_a_directory, file={sandbox.file_id(namespace)})"
    )
    assert failure in rehearsed.stdout.splitlines()
    # Line for line the same report, but for the closing summary's wording.
    assert rehearsed.stdout.splitlines()[:-1] == applied.stdout.splitlines()[:-1]
    assert not list(other.rglob("*.json"))


@pytest.mark.parametrize("where", ["root", "above it"])
def test_a_root_that_links_to_nothing_is_named_and_no_rehearsal_passes_it(
    sandbox: Sandbox, memory: dict[str, Any], tmp_path: Path, where: str
) -> None:
    # No directory can be made where a dangling link is: both checks must say so, and a
    # rehearsed import must fail as the applied one does. Nor may a listing or a backup
    # read it as an empty memory: the memories are somewhere the link no longer leads.
    dump = _exported_project(sandbox, tmp_path)
    link = tmp_path / "root-link"
    link.symlink_to(tmp_path / "nowhere")
    root = link if where == "root" else link / "memory"
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(root)})
    for command in (["check"], ["memory", "check"]):
        checked = run_cli(command, env)
        assert checked.returncode == 1, checked.stdout + checked.stderr
        named = "it is" if where == "root" else f"{link} is"
        assert (
            f"{named} a symbolic link to a path that does not exist"
            in checked.stdout + checked.stderr
        )
    for command in (["list", "project"], ["export", "project"], ["stats"]):
        read = run_cli(["memory", *command], env)
        assert read.returncode == 1, (command, read.stdout, read.stderr)
        assert read.stdout == ""
        assert "memory_root_unavailable" in read.stderr
    rehearsed = run_cli(["memory", "import", str(dump)], env)
    applied = run_cli(["memory", "import", str(dump), "--apply"], env)
    assert rehearsed.returncode == applied.returncode == 1
    assert rehearsed.stdout.splitlines()[:-1] == applied.stdout.splitlines()[:-1]
    assert not (tmp_path / "nowhere").exists()


async def _list_twice(url: str) -> None:
    async with Client(url) as client:
        for _ in range(2):
            await client.call_tool("memory_list", {"scope": "project"})


def test_the_server_logs_one_warning_per_broken_file_per_change(
    sandbox: Sandbox, memory: dict[str, Any]
) -> None:
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    broken = sandbox.memory_root / "project" / "mymcp" / "notes.json"
    with serve(sandbox) as server:
        anyio.run(_list_twice, server.url)
        broken.write_text("{still: broken")  # a change, and still no record
        anyio.run(_list_twice, server.url)
    # The server made the key its file ids are under; `memory check` reads the same one.
    expected = (
        f"skipped scope=project file={sandbox.file_id(('project', 'mymcp', 'notes.json'))} "
        "reason=invalid_json"
    )
    checked = run_cli(["memory", "check"], sandbox.environ())
    assert expected.split(" ")[2] in checked.stdout
    warnings = [line for line in server.output if " WARNING mymcp.memory.store " in line]
    assert [line.rstrip("\n").split(" ", 3)[3] for line in warnings] == [expected, expected]
    assert not any("notes" in line for line in server.output)


def test_check_names_every_kind_of_file_the_server_passes_over(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    record = _remember(
        sandbox,
        scope="project",
        namespace=PROJECT,
        kind="decision",
        title="Kept",
        content="The one good record.",
    )
    root = sandbox.memory_root
    good = root / _path(record)
    mymcp = root / "project" / "mymcp"
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(good.read_bytes())
    (mymcp / "link.json").symlink_to(elsewhere)
    (mymcp / "big.json").write_bytes(b" " * (64 * 1024 + 1))
    (mymcp / "fields.json").write_text('{"title": "no record"}')
    moved = root / "project" / "other"
    moved.mkdir(mode=0o700)
    (moved / good.name).write_bytes(good.read_bytes())  # its namespace says mymcp
    legacy = json.dumps({"schema_version": 1, "id": "old-note", "content": "Legacy."})
    (root / "project" / "old-a.json").write_text(legacy)
    (mymcp / "old-b.json").write_text(legacy)
    os.chmod(good, 0o664)  # the server reads no record others may change
    checked = run_cli(["memory", "check"], sandbox.environ())
    assert checked.returncode == 1, checked.stderr

    def line(parts: tuple[str, ...], why: str, reason: str) -> str:
        return f"{root.joinpath(*parts)}: {why} (reason={reason}, file={sandbox.file_id(parts)})"

    a_legacy = "a legacy record whose id another file in the scope also has"
    assert checked.stdout.splitlines() == [
        f"memory root: {root}",
        "records: 6 candidate files; largest scope project holds 6 (candidate limit 200000)",
        line(("project", "mymcp", "big.json"), "larger than 65536 bytes", "oversized"),
        line(
            ("project", "mymcp", "fields.json"),
            "valid JSON, but not a memory record (wrong or missing fields)",
            "invalid_record",
        ),
        line(
            ("project", "mymcp", "link.json"),
            "a symbolic link; links are never followed",
            "symlink",
        ),
        line(("project", "mymcp", good.name), UNSAFE, "unsafe_permissions"),
        line(("project", "mymcp", "old-b.json"), a_legacy, "duplicate_id"),
        line(("project", "old-a.json"), a_legacy, "duplicate_id"),
        line(
            ("project", "other", good.name),
            "a canonical record in the wrong place for its scope, namespace, collection or id",
            "path_mismatch",
        ),
        "memory check: 7 problem(s)",
    ]
    assert checked.stderr == ""
    # `show` says the same about one file, by the path `check` printed.
    shown = run_cli(["memory", "show", str(good)], sandbox.environ())
    assert (shown.returncode, shown.stderr) == (
        1,
        "mymcp: error: "
        + line(("project", "mymcp", good.name), UNSAFE, "unsafe_permissions")
        + "\n",
    )


@pytest.mark.parametrize(
    "options",
    [
        ["--namespace", "/etc"],
        ["--namespace", "../.."],
        ["--namespace", "mymcp", "--collection", "../../.."],
        ["--namespace", "MyMCP"],
    ],
    ids=["absolute", "parent", "collection", "uppercase"],
)
def test_namespace_and_collection_options_cannot_leave_the_memory_root(
    sandbox: Sandbox, memory: dict[str, Any], options: list[str]
) -> None:
    """They take an id as the tools do, so no option joins a path outside the root."""
    listed = run_cli(["memory", "list", "project", *options], sandbox.environ())
    option, value = options[-2:]
    assert (listed.returncode, listed.stdout) == (2, "")
    assert listed.stderr == (
        f"mymcp: error: {option} takes an id of 1-64 characters of a-z, 0-9, '-' or '_', "
        f"starting and ending with a letter or digit; got {json.dumps(value)}\n"
    )
    if option == "--namespace":
        searched = run_cli(["memory", "search", "project", "server", *options], sandbox.environ())
        assert (searched.returncode, searched.stderr) == (2, listed.stderr)


@pytest.mark.parametrize(
    "command",
    [
        ["memory", "list", "project"],
        ["memory", "export", "project"],
        ["memory", "show", "{reference}"],
        ["memory", "stats"],
        ["check"],
    ],
    ids=["list", "export", "show", "stats", "check"],
)
def test_a_reader_that_stops_early_ends_the_command_quietly(
    sandbox: Sandbox, memory: dict[str, Any], command: list[str]
) -> None:
    """`mymcp memory list project | head -1`: no traceback, the status of SIGPIPE."""
    arguments = [
        json.dumps(memory["editor"]["reference"]) if part == "{reference}" else part
        for part in command
    ]
    reader, writer = os.pipe()
    os.close(reader)  # the reader has already gone: the first write fails
    try:
        ended = subprocess.run(
            [MYMCP, *arguments],
            env=sandbox.environ(),
            stdin=subprocess.DEVNULL,
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(writer)
    assert ended.returncode == 141
    assert "Traceback" not in ended.stderr
    assert "BrokenPipeError" not in ended.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("output", ["full", "closed"])
def test_output_that_cannot_be_written_ends_the_command_with_one_line(
    sandbox: Sandbox, memory: dict[str, Any], output: str
) -> None:
    with open("/dev/full", "wb") as full:  # every write fails: no space left on device
        ended = subprocess.run(
            [MYMCP, "memory", "export", "project"],
            env=sandbox.environ(),
            stdin=subprocess.DEVNULL,
            stdout=full if output == "full" else None,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
            preexec_fn=(lambda: os.close(1)) if output == "closed" else None,
        )
    assert ended.returncode == 1
    assert ended.stderr.splitlines()[-1] == (
        "mymcp: error: the output could not be written: No space left on device"
        if output == "full"
        else "mymcp: error: standard output is closed; nothing can be shown"
    )
    assert "Traceback" not in ended.stderr


def test_import_reports_a_line_that_is_not_utf8_with_its_number(
    sandbox: Sandbox, memory: dict[str, Any], tmp_path: Path
) -> None:
    exported = run_cli(["memory", "export", "project"], sandbox.environ()).stdout
    first = exported.splitlines()[0].encode()
    dump = tmp_path / "mixed.jsonl"
    dump.write_bytes(b"\xff\xfe\n\n" + first + b"\n" + b'{"title": "caf\xe9"}\n' + b"x" * 70000)
    imported = run_cli(
        ["memory", "import", str(dump)],
        sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(tmp_path / "new")}),
    )
    assert imported.returncode == 1
    assert "Traceback" not in imported.stderr
    namespace = memory["timestamps"]["reference"]["namespace_id"]
    assert imported.stdout.splitlines() == [
        f"{dump}:1: not UTF-8 (byte 0xff at column 1)",
        f"{dump}:3: would_remember: project/{namespace}/<new id>.json",
        f"{dump}:4: not UTF-8 (byte 0xe9 at column 15)",
        f"{dump}:5: longer than 65537 bytes, the most one record takes",
        "would remember 1, already present 0, left out 0, invalid 3 "
        "(dry run: add --apply to write)",
    ]


def test_every_memory_command_names_an_unusable_root_and_why(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    a_file = tmp_path / "not-a-directory"
    a_file.write_text("")
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(a_file)})
    fault = (
        f"{a_file}: Mnemosyne memory root is not a directory: set MNEMOSYNE_MEMORY_ROOT to a "
        "directory (or to where one can be created) (code=memory_root_unavailable)"
    )
    checked = run_cli(["memory", "check"], env)
    assert (checked.returncode, checked.stdout.splitlines()) == (
        1,
        [f"memory root: {a_file}", fault, "memory check: 1 problem(s)"],
    )
    dump = tmp_path / "dump.jsonl"
    dump.write_text("{}\n")
    for command in (
        ["memory", "stats"],
        ["memory", "list", "project"],
        ["memory", "export", "project"],
        ["memory", "search", "project", "anything"],
        ["memory", "import", str(dump)],
    ):
        failed = run_cli(command, env)
        assert (failed.returncode, failed.stderr) == (1, f"mymcp: error: {fault}\n"), command
    whole = run_cli(["check"], env)
    assert whole.returncode == 1
    assert f"mymcp: error: {fault}" in whole.stderr.splitlines()
    # Below a file no directory can be created: both commands say so, neither says OK.
    below = a_file / "memory"
    cannot = (
        f"{below}: Mnemosyne memory root cannot be created: {a_file} is not a directory; set "
        "MNEMOSYNE_MEMORY_ROOT to a directory you own (code=memory_root_unavailable)"
    )
    env = sandbox.environ({"MNEMOSYNE_MEMORY_ROOT": str(below)})
    checked = run_cli(["memory", "check"], env)
    assert (checked.returncode, checked.stdout.splitlines()[1:]) == (
        1,
        [cannot, "memory check: 1 problem(s)"],
    )
    whole = run_cli(["check"], env)
    assert whole.returncode == 1
    assert f"mymcp: error: {cannot}" in whole.stderr.splitlines()


def test_memory_check_and_check_agree_on_a_root_writable_by_others(
    sandbox: Sandbox, memory: dict[str, Any]
) -> None:
    os.chmod(sandbox.memory_root, 0o777)  # noqa: S103 - under test
    root = sandbox.memory_root
    fault = (
        f"{root}: Mnemosyne memory root is writable by others: mode 0777; run: chmod go-w "
        f"{root} (code=memory_root_unsafe_permissions)"
    )
    _both_checks_fail_with(sandbox, fault)


def _both_checks_fail_with(sandbox: Sandbox, fault: str) -> None:
    """`memory check` names the fault among its findings, `check` as its error."""
    checked = run_cli(["memory", "check"], sandbox.environ())
    assert checked.returncode == 1
    assert fault in checked.stdout.splitlines()
    whole = run_cli(["check"], sandbox.environ())
    assert whole.returncode == 1
    assert f"mymcp: error: {fault}" in whole.stderr.splitlines()


def test_a_misspelled_mnemosyne_variable_is_named_and_its_value_never_logged(
    sandbox: Sandbox,
) -> None:
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table())
    env = sandbox.environ({"MNEMOSYNE_MEMORY_REMEMBER": "secret-value-1234"})
    checked = run_cli(["check"], env)
    assert checked.returncode == 0, checked.stderr
    log, _ = log_and_errors(checked.stderr)
    assert (
        "mymcp: warning: $MNEMOSYNE_MEMORY_REMEMBER: Mnemosyne does not know this environment "
        "variable and ignores it: did you mean MNEMOSYNE_MEMORY_REMEMBER_ENABLED? Mnemosyne "
        "reads MNEMOSYNE_MEMORY_ROOT, MNEMOSYNE_MEMORY_CANDIDATE_LIMIT, "
        "MNEMOSYNE_MEMORY_REMEMBER_ENABLED, MNEMOSYNE_MEMORY_ARCHIVE_RESTORE_ENABLED, "
        "MNEMOSYNE_MEMORY_REVISE_ENABLED, MNEMOSYNE_MEMORY_FORGET_ENABLED "
        "(code=unknown_environment)"
    ) in log
    # The server's own log line (the same settings loader) names the variable only.
    warning = [line for line in log if "outcome=unknown_variable" in line]
    assert len(warning) == 1
    assert warning[0].endswith(
        " WARNING mymcp.mnemosyne.settings mnemosyne_settings outcome=unknown_variable "
        "name=MNEMOSYNE_MEMORY_REMEMBER"
    )
    assert "secret-value-1234" not in checked.stderr + checked.stdout


def test_a_scope_that_is_no_directory_is_named_by_both_checks(
    sandbox: Sandbox, memory: dict[str, Any]
) -> None:
    scope = sandbox.memory_root / "project"
    scope.mkdir(parents=True, exist_ok=True)
    os.rename(scope, sandbox.memory_root / "project-moved")
    scope.write_text("not a directory")
    why = (
        "a scope's place, but no directory that can be read (a file, or a directory this "
        "user may not read): every read and write of the scope fails until it is moved away "
        "or made readable"
    )
    checked = run_cli(["memory", "check"], sandbox.environ())
    assert checked.returncode == 1
    assert "Traceback" not in checked.stderr
    lines = checked.stdout.splitlines()
    assert any(line.startswith(f"{scope}: {why} (reason=scope_unavailable") for line in lines)
    whole = run_cli(["check"], sandbox.environ())
    assert whole.returncode == 1
    assert "Traceback" not in whole.stderr
    named = (
        f"mymcp: error: {scope}: Mnemosyne cannot read a scope: {why} "
        "(code=memory_scope_unavailable)"
    )
    assert named in whole.stderr.splitlines()
    # The commands that read the scope name the same fault, not only the root.
    for command in (["list", "project"], ["export", "project"], ["search", "project", "x"]):
        failed = run_cli(["memory", *command], sandbox.environ())
        assert (failed.returncode, failed.stderr) == (1, named + "\n"), command


def test_a_linked_scope_is_named_as_unusable_by_both_checks(
    sandbox: Sandbox, memory: dict[str, Any], tmp_path: Path
) -> None:
    # Links are never followed: the scope reads as empty and every write to it fails,
    # so `mymcp check` must not pass it as one more skipped file.
    scope = sandbox.memory_root / "project"
    if scope.exists():
        os.rename(scope, sandbox.memory_root / "project-moved")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    scope.symlink_to(elsewhere, target_is_directory=True)
    why = (
        "a symbolic link in a scope's place: links are never followed, so the scope reads "
        "as empty and every write to it fails until a directory replaces the link"
    )
    checked = run_cli(["memory", "check"], sandbox.environ())
    assert checked.returncode == 1
    assert f"{scope}: {why} (reason=symlink," in checked.stdout
    whole = run_cli(["check"], sandbox.environ())
    assert whole.returncode == 1
    assert (
        f"mymcp: error: {scope}: Mnemosyne cannot read a scope: {why} "
        "(code=memory_scope_unavailable)"
    ) in whole.stderr.splitlines()
    assert "memory_files_skipped" not in whole.stderr


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo"])
def test_a_lock_file_that_is_no_file_is_named_by_both_checks(
    sandbox: Sandbox, memory: dict[str, Any], tmp_path: Path, kind: str
) -> None:
    # Every write takes the root's lock: with anything but a file there, every write
    # fails, and the checks are where the operator learns why.
    lock = sandbox.memory_root / ".mnemosyne.lock"
    lock.unlink(missing_ok=True)
    if kind == "directory":
        lock.mkdir()
    elif kind == "symlink":
        lock.symlink_to(tmp_path / "elsewhere")
    else:
        os.mkfifo(lock)
    checked = run_cli(["memory", "check"], sandbox.environ())
    assert checked.returncode == 1
    whole = run_cli(["check"], sandbox.environ())
    assert whole.returncode == 1
    for output in (checked.stdout, whole.stderr):
        assert f"{lock}: Mnemosyne cannot take the memory root's write lock: " in output
        assert "(code=memory_lock_unusable)" in output


def test_a_file_where_a_namespace_would_be_is_named_by_memory_check(
    sandbox: Sandbox, memory: dict[str, Any]
) -> None:
    stray = sandbox.memory_root / "project" / "alpha"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_text("not a directory")
    (sandbox.memory_root / "project" / "notes.txt").write_text("not an id: harmless")
    checked = run_cli(["memory", "check"], sandbox.environ())
    assert checked.returncode == 1
    named = [line for line in checked.stdout.splitlines() if line.startswith(f"{stray}: ")]
    assert len(named) == 1
    assert "(reason=not_a_directory," in named[0]
    assert "notes.txt" not in checked.stdout
    # The commands that read the namespace name what is in its place, not only the root.
    for command in (
        ["list", "project", "--namespace", "alpha"],
        ["search", "project", "x", "--namespace", "alpha"],
    ):
        failed = run_cli(["memory", *command], sandbox.environ())
        assert failed.returncode == 1, command
        assert failed.stderr.splitlines()[-1] == f"mymcp: error: {named[0]}", command


def test_search_reads_a_root_whose_write_lock_is_unusable(
    sandbox: Sandbox, memory: dict[str, Any]
) -> None:
    # Only writes take the lock: every reading command works without it, search too.
    lock = sandbox.memory_root / ".mnemosyne.lock"
    lock.unlink(missing_ok=True)
    os.mkfifo(lock, 0o600)
    found = run_cli(["memory", "search", "preference", "which editor"], sandbox.environ())
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines() == [_path(memory["editor"]), "  Editor  [matched: editor]"]


@pytest.mark.parametrize("query", ["", "q" * 1001])
def test_a_refused_search_is_one_line_of_error(sandbox: Sandbox, query: str) -> None:
    refused = run_cli(["memory", "search", "project", query], sandbox.environ())
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        "mymcp: error: query must be non-blank text of at most 1000 characters "
        "(code=invalid_query, field=query)\n"
    )


def test_a_refused_search_with_json_is_the_tools_own_answer(sandbox: Sandbox) -> None:
    refused = run_cli(["memory", "search", "project", "", "--json"], sandbox.environ())
    assert refused.returncode == 1
    answer = json.loads(refused.stdout)
    assert (answer["status"], answer["code"], answer["field"]) == (
        "invalid_request",
        "invalid_query",
        "query",
    )


@pytest.mark.skipif(
    os.geteuid() != 0, reason="only root can give the memory root to another user (nobody)"
)
def test_memory_check_and_check_name_a_root_of_another_user(
    sandbox: Sandbox, memory: dict[str, Any]
) -> None:
    """The server warns of such a root at every start and points at the checks; they
    must then say what is wrong with it."""
    os.chown(sandbox.memory_root, 65534, -1)
    root = sandbox.memory_root
    fault = (
        f"{root}: Mnemosyne memory root belongs to another user: owned by uid 65534, this "
        "command runs as uid 0: run MyMCP as the root's owner, or give it to this user "
        "(chown) (code=memory_root_unsafe_permissions)"
    )
    _both_checks_fail_with(sandbox, fault)

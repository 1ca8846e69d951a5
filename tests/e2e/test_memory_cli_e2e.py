"""`mymcp memory …` and the memory part of `mymcp check`, through the real `mymcp` in a
private HOME; and the server's one warning per broken file per change."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mymcp.plugins.mnemosyne import MnemosyneSettings, create_mnemosyne
from mymcp.plugins.mnemosyne.memory import file_id
from tests.e2e.server import Sandbox, log_and_errors, run_cli, serve

pytestmark = pytest.mark.slow

PROJECT = {"kind": "project", "id": "mymcp", "label": "MyMCP"}


def _remember(sandbox: Sandbox, **arguments: Any) -> dict[str, Any]:
    plugin = create_mnemosyne(MnemosyneSettings(), environ={"HOME": str(sandbox.home)})
    arguments.setdefault("collection", None)
    arguments.setdefault("language", "en")
    arguments.setdefault("origin", "explicit_user_statement")
    arguments.setdefault("tags", [])
    answer: dict[str, Any] = plugin.mutations.remember(arguments).payload
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
        f"file={file_id(('project', 'mymcp', 'notes.json'))})\n"
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
        f"{root}/project/loose: writable by group or others (reason=unsafe_permissions, "
        f"file={file_id(('project', 'loose'))})",
        f"{root}/project/mymcp/notes.json: not valid JSON (or repeats a key) "
        f"(reason=invalid_json, file={file_id(('project', 'mymcp', 'notes.json'))})",
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
    assert "$MNEMOSYNE_MEMORY_ROOT: Mnemosyne memory root is not an absolute path" in (
        relative.stderr
    )


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


async def _list_twice(url: str) -> None:
    async with Client(url) as client:
        for _ in range(2):
            await client.call_tool("memory_list", {"scope": "project"})


def test_the_server_logs_one_warning_per_broken_file_per_change(
    sandbox: Sandbox, memory: dict[str, Any]
) -> None:
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    broken = sandbox.memory_root / "project" / "mymcp" / "notes.json"
    expected = (
        f"skipped scope=project file={file_id(('project', 'mymcp', 'notes.json'))} "
        "reason=invalid_json"
    )
    with serve(sandbox) as server:
        anyio.run(_list_twice, server.url)
        broken.write_text("{still: broken")  # a change, and still no record
        anyio.run(_list_twice, server.url)
    warnings = [line for line in server.output if " WARNING mymcp.memory.store " in line]
    assert [line.rstrip("\n").split(" ", 3)[3] for line in warnings] == [expected, expected]
    assert not any("notes" in line for line in server.output)

"""`mymcp … --help` reads well: every command says what it does in its own help, and
every argument and option says what it takes."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from mymcp.cli import main
from mymcp.cli.parser import SERVING_COMMANDS, build_parser


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def test_every_command_describes_itself_and_every_argument() -> None:
    seen = dict(_commands(build_parser()))
    assert {" ".join(path) for path in seen} >= {
        "serve",
        "check",
        "audit verify",
        "memory check",
        "plugin check",
        "auth token revoke",
    }
    for path, parser in seen.items():
        where = "mymcp " + " ".join(path)
        assert parser.description, f"{where} --help has no description"
        assert parser.description[0].isupper(), where
        assert parser.description.endswith("."), where
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help, f"{where}: {action.dest} has no help"


def test_a_listed_summary_opens_the_command_s_own_help() -> None:
    commands = dict(_commands(build_parser()))
    memory_check = commands[("memory", "check")]
    assert memory_check.description is not None
    assert "symlink" in memory_check.description
    revoke = commands[("auth", "token", "revoke")]
    assert revoke.description == "Remove one credential by id."


@pytest.mark.parametrize("limit", ["-1", "0", "x", "\u00b2", "1" * 10])
def test_a_count_that_is_no_whole_number_from_one_is_a_usage_error(
    limit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["audit", "show", "--limit", limit])
    assert stopped.value.code == 2
    assert "argument --limit: expected a whole number from 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "arguments",
    [
        ["--principal", "operator:\u202e"],
        ["--principal", "operator:\x01"],
        ["--principal", "oauth: "],
        ["--principal", "operator:" + "a" * 300],
        ["--principal", "oauth:x", "--scope", ""],
        ["--principal", "oauth:x", "--scope", "a\x01"],
        ["--principal", "operator:alice", "--scope", "read"],
        # More scopes than a token authentication accepts.
        ["--principal", "oauth:x", *[f"--scope=s{n}" for n in range(65)]],
    ],
)
def test_policy_explain_takes_only_principals_and_scopes_a_caller_can_have(
    arguments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "explain", *arguments]) == 2
    error = capsys.readouterr().err
    assert error.startswith("mymcp: error: --")
    assert all(char.isprintable() for char in error.rstrip("\n"))  # shown escaped


def test_the_logging_options_may_follow_any_command() -> None:
    parser = build_parser()
    for path, command in _commands(parser):
        if any(isinstance(a, argparse._SubParsersAction) for a in command._actions):
            continue  # only complete commands parse
        arguments = [*path, *_required_placeholders(command)]
        parsed = parser.parse_args([*arguments, "--log-level", "debug", "--log-format", "json"])
        assert (parsed.log_level, parsed.log_format) == ("debug", "json"), path
        before = parser.parse_args(["--log-level", "error", *arguments])
        assert before.log_level == "error", path


def _required_placeholders(command: argparse.ArgumentParser) -> list[str]:
    """A value for each positional argument and each required option."""
    values: list[str] = []
    for action in command._actions:
        if not action.option_strings:
            values.append("x")
        elif action.required:
            values += [action.option_strings[0], "operator:x"]
    return values


@pytest.mark.parametrize(
    "arguments",
    [
        ["memory", "list", "project", "\x1b]0;pwned\x07\u202e"],  # unrecognized argument
        ["memory", "\x1b[31mX"],  # invalid choice
        ["audit", "show", "--limit", "\x1b[2J"],  # invalid value
    ],
)
def test_a_usage_error_shows_what_was_typed_with_controls_escaped(
    arguments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(arguments)
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "\x1b" not in error
    assert "\x07" not in error
    assert "\u202e" not in error
    assert "mymcp" in error.splitlines()[-1]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("buffered", [True, False])
@pytest.mark.parametrize("command", [["--help"], ["memory", "list", "--help"], ["--version"]])
def test_help_that_cannot_be_written_says_so(command: list[str], buffered: bool) -> None:
    # Unbuffered, the write itself fails (argparse used to drop that); buffered, the
    # flush after it does.
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    if not buffered:
        environ["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full", "wb") as full:
        ended = subprocess.run(
            [sys.executable, "-m", "mymcp.cli", *command],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
            timeout=60,
            check=False,
        )
    assert (ended.returncode, ended.stderr) == (
        1,
        "mymcp: error: the output could not be written: No space left on device\n",
    )


def test_the_logging_defaults_each_command_states_are_the_ones_it_uses() -> None:
    # Only the serving commands read `[server]`'s logging keys; the others log warnings
    # unless asked for more, and their help must not promise otherwise.
    for path, parser in _commands(build_parser()):
        if not path:
            continue
        helps = {action.dest: action.help or "" for action in parser._actions}
        serving = path[0] in SERVING_COMMANDS
        where = "mymcp " + " ".join(path)
        assert ("[server] log_level" in helps["log_level"]) is serving, where
        assert ("[server] log_format" in helps["log_format"]) is serving, where
        assert helps["log_level"].endswith("then info)" if serving else "then warning)"), where


def _usage_error(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The lines a usage error prints on stderr, after checking argparse's exit status."""
    with pytest.raises(SystemExit) as stopped:
        main(arguments)
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


def test_an_unknown_option_of_a_subcommand_shows_that_subcommand_s_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The report that started this: `--scope` belongs to `policy explain`, not here.
    lines = _usage_error(["memory", "search", "--scope", "project", "x"], capsys)
    assert lines[0].startswith("usage: mymcp memory search [-h]")
    assert "SCOPE QUERY" in " ".join(lines[:-1])
    assert "COMMAND ..." not in " ".join(lines)
    assert lines[-1] == "mymcp memory search: error: unrecognized arguments: --scope"


def test_an_unknown_argument_of_a_top_level_command_shows_its_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = _usage_error(["check", "--bogus", "extra"], capsys)
    assert lines[0].startswith("usage: mymcp check [-h]")
    assert lines[-1] == "mymcp check: error: unrecognized arguments: --bogus extra"


@pytest.mark.parametrize(
    ("arguments", "unknown"),
    [
        (["--bogus"], "--bogus"),
        (["--bogus", "memory", "stats"], "--bogus"),
        (["--bogus=1", "check"], "--bogus=1"),
        # An option's value is not read as the command (it would be "invalid choice").
        (["--port", "9000"], "--port"),
        (["-p", "9000"], "-p"),
        (["--log-level", "debug", "--port", "9000"], "--port"),
        (["--log-format=json", "--port", "9000", "check"], "--port"),
    ],
)
def test_an_unknown_option_of_mymcp_itself_shows_the_top_level_usage(
    arguments: list[str], unknown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _usage_error(arguments, capsys)
    assert lines[0].startswith("usage: mymcp [-h]")
    assert "COMMAND ..." in " ".join(lines[:-1])
    assert lines[-1] == f"mymcp: error: unrecognized arguments: {unknown}"


@pytest.mark.parametrize(
    "arguments",
    [["--log-level", "debug", "--version"], ["--log-l", "debug", "--version"], ["--vers"]],
)
def test_known_options_before_the_command_still_parse(
    arguments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as leaving:
        build_parser().parse_args(arguments)
    assert leaving.value.code == 0
    assert capsys.readouterr().out.startswith("mymcp ")


def test_an_unknown_option_between_a_command_and_its_subcommand_is_the_command_s(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `memory stats` takes --json, `memory` does not: the word is refused by the command
    # it was typed after, whose usage shows where it went wrong.
    lines = _usage_error(["memory", "--json", "stats"], capsys)
    assert lines[0].startswith("usage: mymcp memory [-h]")
    assert lines[-1] == "mymcp memory: error: unrecognized arguments: --json"


def test_every_command_refuses_an_unknown_argument_with_its_own_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    checked = 0
    for path, command in _commands(build_parser()):
        if not path or any(isinstance(a, argparse._SubParsersAction) for a in command._actions):
            continue  # only complete commands parse
        where = "mymcp " + " ".join(path)
        arguments = [*path, *_required_placeholders(command), "--no-such-option", "extra"]
        lines = _usage_error(arguments, capsys)
        assert lines[0].startswith(f"usage: {where} [-h]"), where
        assert lines[-1] == f"{where}: error: unrecognized arguments: --no-such-option extra"
        checked += 1
    assert checked >= 15


@pytest.mark.parametrize("module", ["mymcp", "mymcp.cli"])
def test_python_dash_m_runs_the_same_command(module: str) -> None:
    # For an environment whose scripts directory is not on PATH.
    ran = subprocess.run(
        [sys.executable, "-m", module, "check", "--no-such-option"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 2
    assert ran.stdout == ""
    assert ran.stderr.startswith("usage: mymcp check")
    assert ran.stderr.endswith("mymcp check: error: unrecognized arguments: --no-such-option\n")

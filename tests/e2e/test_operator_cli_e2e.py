"""Operator commands through the real `mymcp` and `mymcp-test` entry points, in a private
HOME and XDG configuration."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.server import MYMCP, Sandbox, log_and_errors, run_cli
from tests.e2e.test_external_plugins import _WORKING_MODULE, _synthetic_plugin

pytestmark = pytest.mark.slow

# Activates its one tool as read-write and under another version than its manifest's.
_MISMATCHED = """
import json
from pathlib import Path
from mymcp.plugin import (ActivatedTool, Consent, PluginAdapter, PluginContribution,
    QualifiedCapabilityId, ToolEffects, manifest_from_mapping, structured_result)

def mymcp_plugin_v1():
    definition = manifest_from_mapping(
        json.loads(Path(__file__).with_name("manifest.json").read_text()))
    tool = ActivatedTool(
        capability=QualifiedCapabilityId(definition.plugin_id, "tool", "ping"),
        tool={"description": "Pong.", "inputSchema": {"type": "object"}},
        handler=lambda arguments: structured_result({}),
        effects=ToolEffects(read_only=False, destructive=False, idempotent=True,
                            open_world=False),
        consent=Consent.NONE,
    )
    return PluginAdapter(definition, PluginContribution(definition.plugin_id, "9.9.9", (tool,)))
"""


def test_plugin_check_prints_every_mismatch(sandbox: Sandbox) -> None:
    folder = _synthetic_plugin(sandbox, "odd", "odd_plugin", _MISMATCHED)
    manifest = folder / "manifest.json"
    environment = sandbox.environ({"PYTHONPATH": str(folder)})
    checked = run_cli(["plugin", "check", str(manifest), "--import", "odd_plugin"], environment)
    assert checked.returncode == 1
    _, errors = log_and_errors(checked.stderr)
    version = json.loads(manifest.read_text())["version"]
    assert errors == [
        "mymcp: error: plugin odd (module odd_plugin): MyMCP plugin contribution version does "
        f"not match: the contribution has version '9.9.9', the manifest '{version}' "
        "(code=contribution_version_mismatch)",
        "mymcp: error: plugin odd (module odd_plugin): MyMCP plugin tool effects or consent "
        "differ from the manifest: tool 'ping': read_only is true in the manifest, false in "
        "the adapter (code=capability_metadata_mismatch)",
    ]
    # The server stops at the first, under the composition code, naming the same fault.
    sandbox.write_config(sandbox.plugin_config("odd", manifest, "odd_plugin"))
    started = run_cli(["check"], environment)
    _, said = log_and_errors(started.stderr)
    assert said == [
        "mymcp: error: plugin odd (module odd_plugin): MyMCP external plugins could not be "
        f"composed with the host: contribution_version_mismatch: the contribution has version "
        f"'9.9.9', the manifest '{version}' (code=external_plugin_composition_invalid)"
    ]


def test_check_reports_what_it_composed(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table())
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 0, checked.stderr
    audit = sandbox.home / ".local" / "state" / "mymcp" / "audit"
    assert checked.stdout.splitlines() == [
        f"configuration: {sandbox.config_file} (schema 8)",
        "plugins: none",
        "tools: list_tools, memory_recall, memory_list, memory_inspect",
        "authentication: anonymous allowed; no adapter enabled",
        "policy: none (every principal may call every tool)",
        "approval: none (no call waits for a person)",
        f"audit: on, {audit} (created at first start)",
        f"memory: {sandbox.memory_root} (absent; created by the first remember)",
        "mymcp: check OK",
    ]
    assert not sandbox.memory_root.exists()
    assert not audit.exists()  # check never creates files


def test_check_warns_of_an_audit_segment_that_is_no_regular_file(sandbox: Sandbox) -> None:
    # The start goes on (read-only tools are served), so the check passes, but says so.
    audit = sandbox.root / "audit"
    audit.mkdir(mode=0o700)
    os.mkfifo(audit / "segment-000001.jsonl", 0o600)
    sandbox.write_config(
        "schema_version = 8\n" + sandbox.server_table() + f'[audit]\ndirectory = "{audit}"\n'
    )
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 0, checked.stderr
    warnings = [line for line in checked.stderr.splitlines() if "mymcp: warning:" in line]
    assert warnings == [
        f"mymcp: warning: {sandbox.config_file}: audit.directory: "
        f"{audit / 'segment-000001.jsonl'} is no regular file, which the writer never makes: "
        "`mymcp audit verify` reports it, and once the log would continue into it (no "
        "regular segment after it), calls of tools that change anything are refused "
        "(audit_unavailable)"
    ]


def test_check_names_the_plugins_it_read_but_left_off(sandbox: Sandbox) -> None:
    # An operator who just set `enabled = false` sees that the entry was read.
    config = sandbox.plugin_config("ghost", sandbox.root / "absent.json", "ghost_plugin")
    sandbox.write_config(config.replace("enabled = true", "enabled = false"))
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 0, checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[1:3] == ["plugins: none", "plugins disabled: ghost"]


def test_check_names_the_tools_that_wait_for_approval(sandbox: Sandbox) -> None:
    approval = '[approval]\ntools = ["memory_list", "memory_recall"]\nttl_seconds = 120\n'
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table() + approval)
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 0, checked.stderr
    assert (
        "approval: memory_recall, memory_list (in the console; an approval expires after 120 s)"
        in checked.stdout.splitlines()
    )


def test_approval_with_a_console_nobody_could_sign_in_to_stops_check_and_start(
    sandbox: Sandbox,
) -> None:
    """Approvals are given in the console: a state directory no sign-in could use would
    leave every such call waiting forever, so check, serve and stdio stop, naming it."""
    approval = '[approval]\ntools = ["memory_list"]\n'
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table() + approval)
    state = sandbox.home / ".local" / "state" / "mymcp" / "console"
    assert run_cli(["check"], sandbox.environ()).returncode == 0  # absent: made at sign-in
    state.mkdir(parents=True)
    state.chmod(0o777)
    for command in (["check"], [], ["stdio"]):
        run = run_cli(command, sandbox.environ())
        assert run.returncode == 1, (command, run.stderr)
        (error,) = [line for line in run.stderr.splitlines() if line.startswith("mymcp: error:")]
        assert error.startswith(f"mymcp: error: {state}: ")
        assert "open to group or others (mode 0777)" in error
        assert "could never be approved" in error
        assert error.endswith("(code=console_state_unavailable)")
    state.chmod(0o700)
    assert run_cli(["check"], sandbox.environ()).returncode == 0
    sandbox.write_config("schema_version = 8\n" + sandbox.server_table())
    state.chmod(0o777)
    assert run_cli(["check"], sandbox.environ()).returncode == 0  # no approval, no need


# A plugin that starts a thread of its own when it is loaded and never stops it.
_POLLING_MODULE = (
    "import threading\n"
    "threading.Thread(target=threading.Event().wait, name='poller').start()\n" + _WORKING_MODULE
)


@pytest.mark.parametrize(
    ("command", "extra", "status"),
    [
        (["check"], "", 0),
        (["plugin", "check", "{manifest}", "--import", "polling_plugin"], "", 0),
        # A start that fails after the plugin was loaded (a policy naming no tool).
        (
            [],
            '[policy]\ndefault = "deny"\n[[policy.rules]]\nprincipals = ["*"]\n'
            'allow = ["nothing_here"]\n',
            1,
        ),
    ],
    ids=["check", "plugin-check", "failed-start"],
)
def test_a_plugins_own_thread_never_keeps_a_command_from_ending(
    sandbox: Sandbox, command: list[str], extra: str, status: int
) -> None:
    folder = _synthetic_plugin(sandbox, "polling", "polling_plugin", _POLLING_MODULE)
    manifest = folder / "manifest.json"
    config = sandbox.plugin_config("polling", manifest, "polling_plugin")
    sandbox.write_config(config.replace("schema_version = 2", "schema_version = 8") + extra)
    environment = sandbox.environ({"PYTHONPATH": str(folder)})
    argv = [part.format(manifest=manifest) for part in command]
    ended = run_cli(argv, environment, timeout=30)  # it used to wait for the thread for good
    assert ended.returncode == status, ended.stderr
    assert "outcome=threads_left_running count=1" in ended.stderr


# A plugin whose import takes long (a large dependency): it says so, then waits.
_SLOW_MODULE = (
    "import sys, threading\n"
    "print('slow import started', file=sys.stderr, flush=True)\n"
    "threading.Event().wait(60)\n" + _WORKING_MODULE
)


@pytest.mark.parametrize(
    ("command", "stop", "status"),
    [
        (["check"], signal.SIGINT, 130),
        (["serve"], signal.SIGINT, 130),
        (["stdio"], signal.SIGINT, 130),
        # The servers leave on SIGTERM as they do once serving; `check` ends by the signal.
        (["serve"], signal.SIGTERM, 0),
        (["stdio"], signal.SIGTERM, 0),
        (["stdio"], signal.SIGHUP, 0),
    ],
    ids=[
        "check-ctrl-c",
        "serve-ctrl-c",
        "stdio-ctrl-c",
        "serve-sigterm",
        "stdio-sigterm",
        "stdio-sighup",
    ],
)
def test_a_stop_while_a_plugin_imports_is_neither_a_traceback_nor_the_plugins_fault(
    sandbox: Sandbox, command: list[str], stop: signal.Signals, status: int
) -> None:
    folder = _synthetic_plugin(sandbox, "slow", "slow_plugin", _SLOW_MODULE)
    config = sandbox.plugin_config("slow", folder / "manifest.json", "slow_plugin")
    sandbox.write_config(config.replace("schema_version = 2", "schema_version = 8"))
    process = subprocess.Popen(
        [MYMCP, *command],
        env=sandbox.environ({"PYTHONPATH": str(folder)}),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        seen = []
        for line in process.stderr:  # the import has begun once the plugin says so
            seen.append(line)
            if "slow import started" in line:
                break
        process.send_signal(stop)
        rest = process.stderr.read()
        assert process.wait(timeout=30) == status
    finally:
        process.kill()
        process.wait()
    output = "".join(seen) + rest
    assert "Traceback" not in output
    assert "could not be imported" not in output
    assert "external_plugin" not in output
    if command == ["stdio"]:
        # The lines logged before the stop, held for the configured format, still come out.
        assert "host_configuration outcome=loaded" in output


def test_mymcp_test_runs_the_checkout_suite_from_any_directory(tmp_path: Path) -> None:
    runner = Path(sys.executable).with_name("mymcp-test")
    ran = subprocess.run(
        [str(runner), "tests/test_opencode_config.py", "-q", "-p", "no:randomly"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert " passed" in ran.stdout


@pytest.mark.parametrize(
    ("body", "mode", "environment", "expected"),
    [
        (
            "schema_version = 8\n[server]\nprot = 8000\n",
            0o600,
            {},
            "{file}:3:1: server.prot: MyMCP configuration does not match its schema: unknown "
            "key; [server] takes address, log_format, log_level, port (code=invalid_schema)",
        ),
        (
            'schema_version = 8\n[server]\nport = "8000"\n',
            0o600,
            {},
            "{file}:3:1: server.port: MyMCP configuration does not match its schema: expected "
            'an integer from 1 to 65535, got "8000" (a string) (code=invalid_schema)',
        ),
        (
            "schema_version = 8\n[server]\nport 8000\n",
            0o600,
            {},
            "{file}:3:6: MyMCP configuration is not valid TOML: Expected '=' after a key in a "
            "key/value pair (code=invalid_toml)",
        ),
        (
            "schema_version = 8\n",
            0o620,
            {},
            "{file}: MyMCP configuration source permissions are unsafe: the file is writable "
            "by group or others (mode 0620); run: chmod go-w {file} (code=unsafe_permissions)",
        ),
        (
            "schema_version = 8\n",
            0o600,
            {"MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "yes"},
            "$MNEMOSYNE_MEMORY_REMEMBER_ENABLED: Mnemosyne setting in the environment is "
            'invalid: expected exactly true or false, got "yes" (a string) '
            "(code=invalid_environment)",
        ),
    ],
    ids=["unknown-key", "mistyped-port", "toml-syntax", "permissions", "environment"],
)
def test_check_names_the_fault(
    sandbox: Sandbox, body: str, mode: int, environment: dict[str, str], expected: str
) -> None:
    sandbox.write_config(body)
    sandbox.config_file.chmod(mode)
    checked = run_cli(["check"], sandbox.environ(environment))
    assert checked.returncode == 1
    log, errors = log_and_errors(checked.stderr)
    assert errors == ["mymcp: error: " + expected.format(file=sandbox.config_file)]
    assert str(sandbox.root) not in "\n".join(log)


_STAMPED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (ERROR|WARNING) mymcp\.\S+ ")


@pytest.mark.parametrize(
    "command",
    [
        ["check"],
        ["auth", "token", "list"],
        ["audit", "verify"],
        ["audit", "show"],
        ["console", "--no-browser"],
        ["policy", "explain", "--principal", "local"],
        ["plugin", "check", "{manifest}", "--import", "ok_plugin"],
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_every_command_logs_in_the_one_format_from_the_first_line(
    sandbox: Sandbox, command: list[str]
) -> None:
    """A broken configuration is logged with timestamp, level and logger by every command,
    not as a bare `host_configuration outcome=error …`, then named on the terminal."""
    folder = _synthetic_plugin(sandbox, "ok", "ok_plugin", _WORKING_MODULE)
    arguments = [
        str(folder / "manifest.json") if part == "{manifest}" else part for part in command
    ]
    sandbox.write_config("schema_version = 8\n[server\n")
    ran = run_cli(arguments, sandbox.environ({"PYTHONPATH": str(folder)}))
    assert ran.returncode == 1, ran.stdout
    log, errors = log_and_errors(ran.stderr)
    configuration_lines = [line for line in log if "host_configuration" in line]
    assert configuration_lines, ran.stderr
    for line in configuration_lines:
        assert _STAMPED.match(line), line
    assert errors[0] == (
        f"mymcp: error: {sandbox.config_file}:2:8: MyMCP configuration is not valid TOML: "
        "Expected ']' at the end of a table declaration (code=invalid_toml)"
    )


def test_plugin_check_import_fails_when_the_host_configuration_does_not_load(
    sandbox: Sandbox,
) -> None:
    """The plugin would get its values from the configuration: no silent "OK" without."""
    folder = _synthetic_plugin(sandbox, "ok", "ok_plugin", _WORKING_MODULE)
    manifest = str(folder / "manifest.json")
    environment = sandbox.environ({"PYTHONPATH": str(folder)})
    sandbox.write_config("schema_version = 8\n[server]\nprot = 1\n")
    broken = run_cli(["plugin", "check", manifest, "--import", "ok_plugin"], environment)
    assert broken.returncode == 1
    assert "module OK" not in broken.stdout
    assert broken.stderr.splitlines()[-1] == (
        "mymcp: note: --import gives the plugin the values of its [[plugins]] entry, so the "
        "host configuration must load; the module was not imported"
    )
    alone = run_cli(["plugin", "check", manifest], environment)  # the manifest needs none
    assert alone.returncode == 0, alone.stderr
    sandbox.write_config("schema_version = 8\n")
    fixed = run_cli(["plugin", "check", manifest, "--import", "ok_plugin"], environment)
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.splitlines()[-1] == (
        "mymcp: module OK: ok_plugin; it matches its manifest (configuration: none) and every "
        "tool definition is accepted, its schemas compiling under JSON Schema 2020-12"
    )


_SCHEMA_7 = (
    "[authentication]\nanonymous_enabled = true\n[mcp]\nstrict_protocol_version = true\n"
    "session_inactivity_timeout_seconds = 60\nsession_absolute_lifetime_seconds = 60\n"
)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            'schema_version = 8\n[policy]\ndefault = "deny"\n[[policy.rules]]\n'
            'principals = ["local"]\nallow = ["memory_recall", "memory_recal"]\n',
            "{file}:6:27: policy.rules[0].allow[1]: MyMCP configuration policy names a tool "
            'that does not exist: no tool is named "memory_recal" (the tools are: '
            "memory_recall, memory_list, memory_inspect; turned off by a gate: memory_archive, "
            "memory_forget, memory_remember, memory_restore, memory_revise) "
            "(code=policy_unknown_tool)",
        ),
        (
            'schema_version = 7\n[server]\nlog_level = "debug"\n' + _SCHEMA_7,
            "{file}:3:1: server.log_level: MyMCP configuration does not match its schema: "
            "'log_level' needs schema_version = 8 or later; with this schema_version [server] "
            "takes address, port (code=invalid_schema)",
        ),
        (
            "schema_version = 8\n[authentication]\nanonymous_enabled = false\n"
            '[[authentication.adapters]]\nid = "bearer"\ntype = "operator-bearer-v1"\n'
            'enabled = true\nroute = { source = "authorization", scheme = "bearer" }\n'
            '[authentication.operator_bearer]\nverifier_path = "{root}/verifiers.json"\n',
            "{root}/verifiers.json: MyMCP operator bearer verifier source is unusable: "
            "unreadable: no such file or directory; `mymcp auth token create --subject NAME` "
            "creates the file (code=verifier_source)",
        ),
    ],
    ids=["policy-unknown-tool", "newer-schema-key", "missing-verifier"],
)
def test_check_names_faults_found_after_loading_with_their_line(
    sandbox: Sandbox, body: str, expected: str
) -> None:
    sandbox.write_config(body.replace("{root}", str(sandbox.root)))
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 1
    _, errors = log_and_errors(checked.stderr)
    named = expected.replace("{root}", str(sandbox.root)).format(file=sandbox.config_file)
    assert errors == ["mymcp: error: " + named]
    if "[policy]" in body:
        explained = run_cli(["policy", "explain", "--principal", "local"], sandbox.environ())
        assert explained.returncode == 1
        assert log_and_errors(explained.stderr)[1] == ["mymcp: error: " + named]


def test_a_plugin_configuration_error_names_its_line_and_column(sandbox: Sandbox) -> None:
    folder = _synthetic_plugin(sandbox, "ok", "ok_plugin", _WORKING_MODULE)
    manifest = folder / "manifest.json"
    sandbox.write_config(
        sandbox.plugin_config("ok", manifest, "ok_plugin").replace(
            "schema_version = 2", "schema_version = 8"
        )
        + "[plugins.configuration]\ngreting = 42\n"
    )
    environment = sandbox.environ({"PYTHONPATH": str(folder)})
    expected = (
        f"mymcp: error: {sandbox.config_file}:11:1: plugins[0].configuration.greting: MyMCP "
        "external plugin configuration does not match the plugin's schema: unknown key; the "
        "plugin takes no keys (code=external_plugin_configuration_invalid)"
    )
    checked = run_cli(["check"], environment)
    assert (checked.returncode, log_and_errors(checked.stderr)[1]) == (1, [expected])
    # `plugin check --import` reads the same entry and says the same.
    imported = run_cli(["plugin", "check", str(manifest), "--import", "ok_plugin"], environment)
    assert (imported.returncode, log_and_errors(imported.stderr)[1]) == (1, [expected])


def test_check_with_stderr_closed_still_reports_on_stdout(sandbox: Sandbox) -> None:
    finished = subprocess.run(
        [MYMCP, "check"],
        env=sandbox.environ(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.close(2),
    )
    assert finished.returncode == 0
    assert finished.stdout.splitlines()[-1] == "mymcp: check OK"


def test_check_warns_of_a_disabled_adapter_whose_type_does_not_exist(sandbox: Sandbox) -> None:
    # The start never composes a disabled adapter, so it accepts the typo; the check is
    # where the operator hears of it, before enabling the adapter fails the start.
    sandbox.write_config(
        "schema_version = 8\n[authentication]\nanonymous_enabled = true\n"
        '[[authentication.adapters]]\nid = "later"\ntype = "operator-baerer-v1"\n'
        'enabled = false\nroute = { source = "authorization", scheme = "bearer" }\n'
    )
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 0, checked.stderr
    assert "mymcp: check OK" in checked.stdout
    assert (
        f"mymcp: warning: {sandbox.config_file}: authentication.adapters[0].type: "
        "'operator-baerer-v1' is no adapter type"
    ) in checked.stderr


def test_check_warns_when_no_http_request_could_be_let_in(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 8\n[authentication]\nanonymous_enabled = false\n")
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 0, checked.stderr
    warnings = [line for line in checked.stderr.splitlines() if "mymcp: warning:" in line]
    assert warnings == [
        f"mymcp: warning: {sandbox.config_file}: authentication.anonymous_enabled: anonymous "
        "access is off and no adapter is enabled, so every MCP request over HTTP (/mcp) is "
        "refused (401); enable an adapter, or allow anonymous access (mymcp stdio is "
        "unaffected)"
    ]


def test_check_warns_of_a_subject_selector_with_a_space_at_an_end(sandbox: Sandbox) -> None:
    # Valid (a subject may have one), but far more often a typo that matches nobody.
    sandbox.write_config(
        'schema_version = 8\n[policy]\ndefault = "allow"\n'
        '[[policy.rules]]\nprincipals = ["operator:bob", "operator: alice"]\n'
        'deny = ["memory_recall"]\n'
    )
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode == 0, checked.stderr
    warnings = [line for line in checked.stderr.splitlines() if "mymcp: warning:" in line]
    assert warnings == [
        f"mymcp: warning: {sandbox.config_file}: policy.rules[0].principals[1]: "
        "'operator: alice' names a subject that begins or ends with a space; "
        "subjects are matched exactly as written"
    ]

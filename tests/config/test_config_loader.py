"""Loading from the XDG location: defaults, safe sources, every failure code, logging."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mymcp._safefile as safefile
from mymcp import cli
from mymcp.config import (
    HostConfiguration,
    PluginDeclaration,
    load_host_configuration,
    parse_host_configuration,
    validate_semantics,
)
from mymcp.errors import ConfigurationError
from mymcp.governance import Policy
from mymcp.host import build_host, build_runtime
from mymcp.plugins.mnemosyne import MnemosyneSettings, create_mnemosyne
from tests.config.conftest import ConfigHome
from tests.config.helpers import adapter, minimal, plugin, to_toml

REPO = Path(__file__).resolve().parents[2]
LOGGER = "mymcp.host.configuration"


def _load_error(home: ConfigHome) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as caught:
        load_host_configuration(home.environ)
    return caught.value


# --- absent file: defaults -------------------------------------------------------------


def test_missing_directory_gives_defaults(config_home: ConfigHome) -> None:
    config = load_host_configuration(config_home.environ)
    assert config == HostConfiguration(origin="absent_defaults")
    assert config.server.address == "127.0.0.1"
    assert config.server.port == 8000
    assert config.plugins == ()
    assert config.authentication.anonymous_enabled is True
    assert config.mcp.strict_protocol_version is True
    assert config.mcp.session_inactivity_timeout_seconds == 1800
    assert config.mcp.session_absolute_lifetime_seconds == 28800
    assert config.policy is None  # no policy: everything allowed
    assert config.audit.enabled is False  # nothing audited before schema 8


def test_missing_file_gives_defaults(config_home: ConfigHome) -> None:
    config_home.directory.mkdir(mode=0o700)
    assert load_host_configuration(config_home.environ).origin == "absent_defaults"


def test_missing_xdg_directory_gives_defaults(tmp_path: Path) -> None:
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "nowhere")}
    assert load_host_configuration(environ).origin == "absent_defaults"


def test_home_fallback_is_read(tmp_path: Path) -> None:
    directory = tmp_path / ".config" / "mymcp"
    directory.mkdir(parents=True, mode=0o700)
    (directory / "config.toml").write_text(to_toml({"schema_version": 1, "server": {"port": 9}}))
    os.chmod(directory / "config.toml", 0o600)
    config = load_host_configuration({"XDG_CONFIG_HOME": "relative"}, tmp_path)
    assert (config.origin, config.server.port) == ("loaded", 9)


def test_loaded_file(config_home: ConfigHome) -> None:
    config_home.write(to_toml({"schema_version": 2, "plugins": [plugin(2, enabled=True)]}))
    config = load_host_configuration(config_home.environ)
    assert config.origin == "loaded"
    assert config.schema_version == 2
    assert config.plugins[0].enabled is True


# --- one test per failure code ---------------------------------------------------------


def test_invalid_location() -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_host_configuration({"XDG_CONFIG_HOME": "/x\x00y"})
    assert caught.value.code == "invalid_location"


def test_unsafe_path_symlinked_file(config_home: ConfigHome, tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text("schema_version = 1\n")
    config_home.directory.mkdir(mode=0o700)
    config_home.file.symlink_to(real)
    assert _load_error(config_home).code == "unsafe_path"


def test_unsafe_path_symlinked_mymcp_directory(config_home: ConfigHome, tmp_path: Path) -> None:
    real = tmp_path / "real-dir"
    real.mkdir(mode=0o700)
    (real / "config.toml").write_text("schema_version = 1\n")
    config_home.directory.symlink_to(real, target_is_directory=True)
    assert _load_error(config_home).code == "unsafe_path"


def test_unsafe_path_mymcp_is_a_file(config_home: ConfigHome) -> None:
    config_home.directory.write_text("")
    assert _load_error(config_home).code == "unsafe_path"


def test_symlinked_ancestor_is_allowed(tmp_path: Path) -> None:
    real = tmp_path / "real-xdg"
    (real / "mymcp").mkdir(parents=True, mode=0o700)
    (real / "mymcp" / "config.toml").write_text("schema_version = 1\n")
    os.chmod(real / "mymcp" / "config.toml", 0o600)
    link = tmp_path / "link-xdg"
    link.symlink_to(real, target_is_directory=True)
    assert load_host_configuration({"XDG_CONFIG_HOME": str(link)}).origin == "loaded"


def test_not_regular_directory(config_home: ConfigHome) -> None:
    config_home.file.mkdir(parents=True)
    os.chmod(config_home.directory, 0o700)
    assert _load_error(config_home).code == "not_regular"


def test_not_regular_fifo(config_home: ConfigHome) -> None:
    config_home.directory.mkdir(mode=0o700)
    os.mkfifo(config_home.file, 0o600)
    assert _load_error(config_home).code == "not_regular"


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_unsafe_permissions_file(config_home: ConfigHome, mode: int) -> None:
    config_home.write("schema_version = 1\n", mode=mode)
    assert _load_error(config_home).code == "unsafe_permissions"


@pytest.mark.parametrize("mode", [0o770, 0o707])
def test_unsafe_permissions_directory(config_home: ConfigHome, mode: int) -> None:
    config_home.write("schema_version = 1\n")
    os.chmod(config_home.directory, mode)
    assert _load_error(config_home).code == "unsafe_permissions"


def test_readable_by_others_is_fine(config_home: ConfigHome) -> None:
    config_home.write("schema_version = 1\n", mode=0o644)
    os.chmod(config_home.directory, 0o755)  # noqa: S103 - readable, not writable
    assert load_host_configuration(config_home.environ).origin == "loaded"


NOBODY = 65534

# Giving a file away to another user is something only root may do.
as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root can chown a file to another user (nobody)"
)


def _owned_by_another_user(path: Path) -> str:
    """The detail that refuses `path` (the file or the directory) for its owner."""
    what, risk = (
        ("directory", "who could replace the files in it")
        if path.is_dir()
        else ("file", "who could rewrite it")
    )
    return (
        f"the {what} is owned by another user (uid {NOBODY}), {risk} whatever its mode; "
        "that uid is nobody, or a user outside this user namespace (root, seen from a "
        "rootless container): keep it where the user MyMCP runs as owns it"
    )


@as_root
def test_unsafe_permissions_file_owned_by_another_user(config_home: ConfigHome) -> None:
    path = config_home.write("schema_version = 1\n")  # 0600 in a 0700 directory
    os.chown(path, NOBODY, NOBODY)
    error = _load_error(config_home)
    assert error.code == "unsafe_permissions"
    assert str(error) == (
        f"{path}: MyMCP configuration source permissions are unsafe: "
        f"{_owned_by_another_user(path)} (code=unsafe_permissions)"
    )


@as_root
@pytest.mark.parametrize("with_file", [True, False], ids=["file", "no-file"])
def test_unsafe_permissions_directory_owned_by_another_user(
    config_home: ConfigHome, with_file: bool
) -> None:
    # Without a file no defaults either: that user could put one there at any moment.
    if with_file:
        config_home.write("schema_version = 1\n")
    else:
        config_home.directory.mkdir(mode=0o700)
    os.chown(config_home.directory, NOBODY, NOBODY)
    error = _load_error(config_home)
    assert (error.code, error.location.source) == ("unsafe_permissions", str(config_home.directory))
    assert error.detail == _owned_by_another_user(config_home.directory)


@as_root
@pytest.mark.parametrize("owned", ["file", "directory"])
def test_check_and_the_start_refuse_a_configuration_of_another_user(
    config_home: ConfigHome,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    owned: str,
) -> None:
    path = config_home.write("schema_version = 1\n")
    os.chown(path if owned == "file" else config_home.directory, NOBODY, NOBODY)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home.root))
    monkeypatch.setenv("HOME", str(home))
    assert cli.main(["check"]) == 1
    refusal = capsys.readouterr().err.splitlines()[-1]  # after the log line
    assert f"uid {NOBODY}" in refusal
    assert refusal.endswith("(code=unsafe_permissions)")
    # The start reads it with the same loader, so it fails with the same line.
    with pytest.raises(ConfigurationError) as caught:
        build_host(config_home.environ, home)
    assert refusal == f"mymcp: error: {caught.value}"


def test_unreadable(config_home: ConfigHome, monkeypatch: pytest.MonkeyPatch) -> None:
    config_home.write("schema_version = 1\n")

    def failing_read(_fd: int, _n: int) -> bytes:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(safefile.os, "read", failing_read)
    assert _load_error(config_home).code == "unreadable"


def test_too_large(config_home: ConfigHome) -> None:
    config_home.write("schema_version = 1\n" + "#" * 65536)
    assert _load_error(config_home).code == "too_large"


def test_exactly_64_kib_is_read(config_home: ConfigHome) -> None:
    head = "schema_version = 1\n#"
    config_home.write(head + "x" * (65536 - len(head)))
    assert load_host_configuration(config_home.environ).origin == "loaded"


def test_source_changed(config_home: ConfigHome, monkeypatch: pytest.MonkeyPatch) -> None:
    path = config_home.write("schema_version = 1\n")
    real_read = os.read
    edits: list[int] = []

    def read_then_append(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        if not edits:
            edits.append(n)
            with path.open("a") as handle:
                handle.write("# edited\n")
        return data

    monkeypatch.setattr(safefile.os, "read", read_then_append)
    assert _load_error(config_home).code == "source_changed"


def test_invalid_utf8(config_home: ConfigHome) -> None:
    config_home.write(b"schema_version = 1\n# \xff\xfe\n")
    assert _load_error(config_home).code == "invalid_utf8"


@pytest.mark.parametrize(
    "text",
    [
        "schema_version = \n",
        "schema_version = 1\nschema_version = 1\n",
        "[server]\nport = 1\n[server]\nport = 2\n",
        "schema_version = 1\n" + "a = " + "[" * 5000 + "]" * 5000 + "\n",
        "schema_version = " + "9" * 5000 + "\n",
    ],
    ids=["syntax", "duplicate-key", "duplicate-table", "deep-nesting", "huge-int"],
)
def test_invalid_toml(config_home: ConfigHome, text: str) -> None:
    config_home.write(text)
    assert _load_error(config_home).code == "invalid_toml"


def test_unsupported_schema_version(config_home: ConfigHome) -> None:
    config_home.write("schema_version = 9\n")
    assert _load_error(config_home).code == "unsupported_schema_version"


def test_invalid_schema(config_home: ConfigHome) -> None:
    config_home.write("schema_version = 1\n[server]\nport = 0\n")
    assert _load_error(config_home).code == "invalid_schema"


def test_duplicate_plugin(config_home: ConfigHome) -> None:
    config_home.write(to_toml({"schema_version": 2, "plugins": [plugin(2, "p"), plugin(2, "p")]}))
    assert _load_error(config_home).code == "duplicate_plugin"


def test_duplicate_authentication_adapter_id(config_home: ConfigHome) -> None:
    document = minimal(3)
    document["authentication"]["adapters"] = [adapter("a"), adapter("a", scheme="other")]
    config_home.write(to_toml(document))
    assert _load_error(config_home).code == "duplicate_authentication_adapter_id"


def test_duplicate_authentication_adapter_route_among_disabled(config_home: ConfigHome) -> None:
    document = minimal(3)
    document["authentication"]["adapters"] = [adapter("a", profile="p"), adapter("b", profile="p")]
    config_home.write(to_toml(document))
    assert _load_error(config_home).code == "duplicate_authentication_adapter_route"


def test_authentication_adapter_limit_exceeded(config_home: ConfigHome) -> None:
    document = minimal(3)
    document["authentication"]["adapters"] = [adapter(f"a{i}", scheme=f"s{i}") for i in range(33)]
    config_home.write(to_toml(document))
    error = _load_error(config_home)
    assert error.code == "authentication_adapter_limit_exceeded"
    assert error.message.startswith("MyMCP ")
    assert "is exceeded" in error.message


@pytest.mark.parametrize("version", [1, 2, 7])
def test_bundled_plugin_conflict(config_home: ConfigHome, version: int) -> None:
    document = minimal(version)
    document["plugins"] = [plugin(version, "mnemosyne")]
    config_home.write(to_toml(document))
    assert _load_error(config_home).code == "bundled_plugin_conflict"


def test_enabled_plugin_unsupported_is_a_semantic_failure(config_home: ConfigHome) -> None:
    config_home.write(to_toml({"schema_version": 1, "plugins": [plugin(1, enabled=True)]}))
    config = load_host_configuration(config_home.environ)  # the loader accepts it
    with pytest.raises(ConfigurationError) as caught:
        validate_semantics(config)
    assert caught.value.code == "enabled_plugin_unsupported"


def test_disabled_schema1_plugin_passes_the_semantic_pass() -> None:
    config = parse_host_configuration(
        to_toml({"schema_version": 1, "plugins": [plugin(1)]}).encode()
    )
    validate_semantics(config)


@pytest.mark.parametrize(
    ("plugins", "code"),
    [
        ((PluginDeclaration("mnemosyne", False),), "bundled_plugin_conflict"),
        ((PluginDeclaration("a", False), PluginDeclaration("a", False)), "duplicate_plugin"),
        ((PluginDeclaration("a", True),), "invalid_schema"),
    ],
)
def test_semantic_pass_rechecks_programmatic_configurations(
    plugins: tuple[PluginDeclaration, ...], code: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        validate_semantics(HostConfiguration(schema_version=2, plugins=plugins))
    assert caught.value.code == code


# --- messages and logging --------------------------------------------------------------


def test_every_code_has_a_bounded_message() -> None:
    assert len(ConfigurationError.messages()) == 27
    for code, message in ConfigurationError.messages().items():
        assert message.startswith("MyMCP configuration ") or message.endswith("is exceeded"), code


def test_the_message_is_content_free_and_the_terminal_text_names_the_fault(
    config_home: ConfigHome,
) -> None:
    value = "super-secret-value-123"
    config_home.write(to_toml({"schema_version": 1, "server": {"address": value}}))
    error = _load_error(config_home)
    assert error.code == "invalid_schema"
    assert error.message == "MyMCP configuration does not match its schema"
    # The operator's terminal gets the file, the line and column, the key and the value.
    path = config_home.file
    assert (error.location.source, error.location.key) == (str(path), "server.address")
    assert (error.location.line, error.location.column) == (2, 1)
    assert str(error) == (
        f"{path}:2:1: server.address: MyMCP configuration does not match its schema: "
        "expected a loopback IP literal (127.0.0.0/8 or ::1; no host names, no zone), "
        f'got "{value}" (a string) (code=invalid_schema)'
    )


def test_success_is_logged_without_content(
    config_home: ConfigHome, caplog: pytest.LogCaptureFixture
) -> None:
    document = minimal(2)
    document["plugins"] = [plugin(2, "a", enabled=True), plugin(2, "b")]
    document["server"] = {"address": "127.0.0.2", "port": 8001}
    config_home.write(to_toml(document))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        load_host_configuration(config_home.environ)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            LOGGER,
            logging.INFO,
            "host_configuration outcome=loaded schema_version=2 address=127.0.0.2 port=8001 "
            "declarations=2 enabled=1",
        )
    ]


def test_defaults_are_logged(config_home: ConfigHome, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        load_host_configuration(config_home.environ)
    assert caplog.messages == [
        "host_configuration outcome=absent_defaults schema_version=1 address=127.0.0.1 "
        "port=8000 declarations=0 enabled=0"
    ]


def test_failures_are_logged_with_the_code_only(
    config_home: ConfigHome, caplog: pytest.LogCaptureFixture
) -> None:
    config_home.write("schema_version = 1\nsecret = 'do-not-log'\n")
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(ConfigurationError):
        load_host_configuration(config_home.environ)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "host_configuration outcome=error code=invalid_schema")
    ]


def test_semantic_failures_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    config = HostConfiguration(plugins=(PluginDeclaration("a", True),))
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(ConfigurationError):
        validate_semantics(config)
    assert caplog.messages == ["host_configuration outcome=error code=enabled_plugin_unsupported"]


# --- the shipped example ---------------------------------------------------------------


def test_config_example_loads_from_the_xdg_location(config_home: ConfigHome) -> None:
    config_home.write((REPO / "config.example.toml").read_bytes())
    config = load_host_configuration(config_home.environ)
    validate_semantics(config)
    assert config.schema_version == 8
    assert config.server.address == "127.0.0.1"
    assert [(p.id, p.enabled, p.module) for p in config.plugins] == [
        ("example-plugin", False, "mymcp_example_plugin")
    ]
    auth = config.authentication
    assert auth.anonymous_enabled is True
    assert [(a.type, a.enabled) for a in auth.adapters] == [("operator-bearer-v1", False)]
    assert auth.operator_bearer_verifier_path is not None
    assert config.mcp.strict_protocol_version is True
    assert config.mcp.session_inactivity_timeout_seconds == 1800
    assert config.mcp.session_absolute_lifetime_seconds == 28800
    assert config.policy is not None
    assert (config.policy.default, len(config.policy.rules)) == ("deny", 3)
    assert config.audit.enabled is True
    assert config.audit.directory is None
    assert [t.text for t in config.approval.tools] == ["@consent_required"]
    # The example policy composes against the default tools (every mutation gate off).
    environ = {"HOME": "/nonexistent"}
    runtime = build_runtime(config, create_mnemosyne(MnemosyneSettings(), environ=environ))
    view = Policy(config.policy, runtime).view("anonymous")
    assert view.allowed == {"list_tools", "memory_recall", "memory_list", "memory_inspect"}


def _documented_loader_example() -> str:
    """The Python example of CONFIGURATION.md's "Using the loader from Python"."""
    text = (REPO / "docs" / "CONFIGURATION.md").read_text()
    section = text.split("## Using the loader from Python", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_documented_loader_example_runs_as_written(config_home: ConfigHome) -> None:
    example = _documented_loader_example()
    environ = {**os.environ, **config_home.environ}
    config_home.write(to_toml({"schema_version": 8, "server": {"port": 8123}}))
    done = subprocess.run(
        [sys.executable, "-c", example], env=environ, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("127.0.0.1 8123 ")
    config_home.write("schema_version = 99\n")
    done = subprocess.run(
        [sys.executable, "-c", example], env=environ, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "(code=unsupported_schema_version)" in done.stderr

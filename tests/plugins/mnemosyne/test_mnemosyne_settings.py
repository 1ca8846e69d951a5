"""Mnemosyne settings: environment gates, the candidate bound, the strict file, the root."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp._safefile import SafeFileError, SafeFileReason, read_safe_file
from mymcp.errors import MnemosyneSettingsError
from mymcp.plugins.mnemosyne import (
    MnemosyneSettings,
    _settings,
    load_mnemosyne_settings,
    memory_root,
)

GATE_VARIABLES = {
    "remember": "MNEMOSYNE_MEMORY_REMEMBER_ENABLED",
    "archive_restore": "MNEMOSYNE_MEMORY_ARCHIVE_RESTORE_ENABLED",
    "revise": "MNEMOSYNE_MEMORY_REVISE_ENABLED",
    "forget": "MNEMOSYNE_MEMORY_FORGET_ENABLED",
}
FILE_KEYS = {
    "remember": "remember_enabled",
    "archive_restore": "archive_restore_enabled",
    "revise": "revise_enabled",
    "forget": "forget_enabled",
}
LIMIT_VARIABLE = "MNEMOSYNE_MEMORY_CANDIDATE_LIMIT"
ALL_ENV = {**{v: "false" for v in GATE_VARIABLES.values()}, LIMIT_VARIABLE: "10000"}


def write_settings(home: Path, text: str | bytes, *, mode: int = 0o600) -> Path:
    directory = home / ".mnemosyne"
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / "config.toml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    path.chmod(mode)
    return path


def load(home: Path, environ: dict[str, str] | None = None) -> MnemosyneSettings:
    return load_mnemosyne_settings(environ or {}, home)


def code_of(home: Path, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(MnemosyneSettingsError) as info:
        load(home, environ)
    return info.value.code


# --- defaults and the dataclass ----------------------------------------------------------


def test_defaults_without_file_or_environment(tmp_path: Path) -> None:
    assert load(tmp_path) == MnemosyneSettings()
    assert MnemosyneSettings() == MnemosyneSettings(
        remember=False, archive_restore=False, revise=False, forget=False, candidate_limit=200_000
    )


def test_settings_are_frozen_and_checked() -> None:
    settings = MnemosyneSettings()
    with pytest.raises(AttributeError):
        settings.remember = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        MnemosyneSettings(remember=1)  # type: ignore[arg-type]
    for bad in (0, 1_000_001, True, 5.0):
        with pytest.raises(ValueError, match="candidate_limit"):
            MnemosyneSettings(candidate_limit=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    ["", "\n# comment only\n", "[memory]\n", "memory = {}\n"],
    ids=["empty", "comment", "empty-table", "inline-empty"],
)
def test_empty_documents_mean_defaults(tmp_path: Path, text: str) -> None:
    write_settings(tmp_path, text)
    assert load(tmp_path) == MnemosyneSettings()


def test_missing_directory_and_missing_file_mean_defaults(tmp_path: Path) -> None:
    assert load(tmp_path) == MnemosyneSettings()
    (tmp_path / ".mnemosyne").mkdir(mode=0o700)
    assert load(tmp_path) == MnemosyneSettings()
    assert not (tmp_path / ".mnemosyne" / "config.toml").exists()


# --- environment -------------------------------------------------------------------------


@pytest.mark.parametrize("gate", list(GATE_VARIABLES))
def test_each_gate_variable_sets_only_its_gate(tmp_path: Path, gate: str) -> None:
    settings = load(tmp_path, {GATE_VARIABLES[gate]: "true"})
    for name in GATE_VARIABLES:
        assert getattr(settings, name) is (name == gate)


@pytest.mark.parametrize("gate", list(GATE_VARIABLES))
def test_environment_overrides_only_its_own_file_key(tmp_path: Path, gate: str) -> None:
    write_settings(
        tmp_path,
        "[memory]\n" + "".join(f"{key} = true\n" for key in FILE_KEYS.values()),
    )
    settings = load(tmp_path, {GATE_VARIABLES[gate]: "false"})
    for name in GATE_VARIABLES:
        assert getattr(settings, name) is (name != gate)


@pytest.mark.parametrize("value", ["True", "TRUE", "1", "yes", "", " true", "false\n", "on", "0"])
@pytest.mark.parametrize("variable", list(GATE_VARIABLES.values()))
def test_gate_values_other_than_true_false_are_rejected(
    tmp_path: Path, variable: str, value: str
) -> None:
    assert code_of(tmp_path, {variable: value}) == "invalid_environment"


@given(st.text(max_size=12))
def test_gate_parser_accepts_exactly_true_and_false(text: str) -> None:
    expected = {"true": True, "false": False}.get(text)
    assert _settings.parse_gate_value(text) is expected


@given(st.text(max_size=12))
def test_gate_environment_fails_closed_for_any_other_text(text: str) -> None:
    environ = {GATE_VARIABLES["forget"]: text}
    home = Path("/nonexistent-mnemosyne-home")  # never read: gates fail before file access
    if text in ("true", "false"):
        environ = {**ALL_ENV, GATE_VARIABLES["forget"]: text}
        assert load_mnemosyne_settings(environ, home).forget is (text == "true")
    else:
        with pytest.raises(MnemosyneSettingsError) as info:
            load_mnemosyne_settings(environ, home)
        assert info.value.code == "invalid_environment"


def test_candidate_limit_from_environment(tmp_path: Path) -> None:
    assert load(tmp_path, {LIMIT_VARIABLE: "1"}).candidate_limit == 1
    assert load(tmp_path, {LIMIT_VARIABLE: "1000000"}).candidate_limit == 1_000_000
    assert load(tmp_path, {LIMIT_VARIABLE: "250"}).candidate_limit == 250


@pytest.mark.parametrize(
    "value", ["0", "1000001", "-1", "+5", "05", " 5", "5 ", "1e3", "1_000", "", "٣", "10.0"]
)
def test_candidate_limit_environment_rejects_other_text(tmp_path: Path, value: str) -> None:
    assert code_of(tmp_path, {LIMIT_VARIABLE: value}) == "invalid_environment"


@given(st.integers(min_value=-(10**9), max_value=10**9))
def test_candidate_limit_parser_range(number: int) -> None:
    expected = number if 1 <= number <= 1_000_000 else None
    assert _settings.parse_candidate_limit(str(number)) == expected


@given(st.text(max_size=10))
def test_candidate_limit_parser_accepts_only_canonical_decimals(text: str) -> None:
    parsed = _settings.parse_candidate_limit(text)
    if parsed is not None:
        assert str(parsed) == text
        assert 1 <= parsed <= 1_000_000


def test_invalid_environment_fails_before_any_file_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_settings(tmp_path, "not toml at all [")

    def forbidden(*_args: object, **_kwargs: object) -> bytes:
        raise AssertionError("the settings file must not be read")

    monkeypatch.setattr(_settings, "read_safe_file", forbidden)
    assert code_of(tmp_path, {GATE_VARIABLES["revise"]: "maybe"}) == "invalid_environment"
    assert code_of(tmp_path, {LIMIT_VARIABLE: "many"}) == "invalid_environment"


def test_file_is_skipped_only_when_all_five_variables_are_set(tmp_path: Path) -> None:
    write_settings(tmp_path, "definitely [ not toml")
    settings = load(tmp_path, {**ALL_ENV, GATE_VARIABLES["remember"]: "true"})
    assert settings == MnemosyneSettings(remember=True, candidate_limit=10_000)
    for variable in ALL_ENV:
        partial = {key: value for key, value in ALL_ENV.items() if key != variable}
        assert code_of(tmp_path, partial) == "invalid_toml"


def test_file_values_fill_what_the_environment_leaves_open(tmp_path: Path) -> None:
    write_settings(
        tmp_path,
        "[memory]\nremember_enabled = true\nforget_enabled = true\ncandidate_limit = 77\n",
    )
    assert load(tmp_path) == MnemosyneSettings(remember=True, forget=True, candidate_limit=77)
    assert load(tmp_path, {LIMIT_VARIABLE: "5"}) == MnemosyneSettings(
        remember=True, forget=True, candidate_limit=5
    )


def test_settings_file_is_read_at_most_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_settings(tmp_path, "[memory]\nrevise_enabled = true\n")
    calls: list[Path] = []

    def counting(path: Path, *, max_bytes: int, private: bool = False) -> bytes:
        calls.append(path)
        return read_safe_file(path, max_bytes=max_bytes, private=private)

    monkeypatch.setattr(_settings, "read_safe_file", counting)
    assert load(tmp_path).revise is True
    assert calls == [tmp_path / ".mnemosyne" / "config.toml"]


# --- file schema ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '[memory]\nremember_enabled = "true"\n',
        "[memory]\nremember_enabled = 1\n",
        "[memory]\nunknown_enabled = true\n",
        "[other]\n",
        "remember_enabled = true\n",
        "[[memory]]\nremember_enabled = true\n",
        "memory = true\n",
        "[memory]\ncandidate_limit = 0\n",
        "[memory]\ncandidate_limit = 1000001\n",
        "[memory]\ncandidate_limit = true\n",
        "[memory]\ncandidate_limit = 10.0\n",
        '[memory]\ncandidate_limit = "10"\n',
        "[memory.nested]\n",
    ],
)
def test_file_schema_violations(tmp_path: Path, text: str) -> None:
    write_settings(tmp_path, text)
    assert code_of(tmp_path) == "invalid_schema"


@pytest.mark.parametrize(
    "data",
    [
        b"[memory\n",
        b"[memory]\nremember_enabled = true\nremember_enabled = false\n",
        b"[memory]\n[memory]\n",
        b"[memory]\nremember_enabled = True\n",
        b"\xff\xfe[memory]\n",
        b"[memory]\ntitle = '\xc3'\n",
    ],
    ids=["syntax", "duplicate-key", "duplicate-table", "capital-bool", "utf16", "bad-utf8"],
)
def test_malformed_files_are_invalid_toml(tmp_path: Path, data: bytes) -> None:
    write_settings(tmp_path, data)
    assert code_of(tmp_path) == "invalid_toml"


def test_file_size_bound(tmp_path: Path) -> None:
    body = "[memory]\nremember_enabled = true\n"
    padding = 16 * 1024 - len(body)
    write_settings(tmp_path, body + "#" * (padding - 1) + "\n")
    assert load(tmp_path).remember is True
    write_settings(tmp_path, body + "#" * padding + "\n")
    assert code_of(tmp_path) == "too_large"


# --- safe source ---------------------------------------------------------------------------


def test_symlinked_file_is_unsafe(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text("[memory]\n")
    (tmp_path / ".mnemosyne").mkdir(mode=0o700)
    (tmp_path / ".mnemosyne" / "config.toml").symlink_to(real)
    assert code_of(tmp_path) == "unsafe_path"


def test_symlinked_directory_is_unsafe(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (real / "config.toml").write_text("[memory]\n")
    (tmp_path / ".mnemosyne").symlink_to(real)
    assert code_of(tmp_path) == "unsafe_path"


def test_directory_in_place_of_file_is_not_regular(tmp_path: Path) -> None:
    (tmp_path / ".mnemosyne" / "config.toml").mkdir(parents=True, mode=0o700)
    assert code_of(tmp_path) == "not_regular"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_in_place_of_file_is_not_regular(tmp_path: Path) -> None:
    (tmp_path / ".mnemosyne").mkdir(mode=0o700)
    os.mkfifo(tmp_path / ".mnemosyne" / "config.toml", 0o600)
    assert code_of(tmp_path) == "not_regular"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_file_writable_by_others_is_unsafe(tmp_path: Path, mode: int) -> None:
    write_settings(tmp_path, "[memory]\n", mode=mode)
    assert code_of(tmp_path) == "unsafe_permissions"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_directory_writable_by_others_is_unsafe(tmp_path: Path) -> None:
    write_settings(tmp_path, "[memory]\n")
    (tmp_path / ".mnemosyne").chmod(0o777)
    assert code_of(tmp_path) == "unsafe_permissions"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_readable_by_others_is_accepted(tmp_path: Path) -> None:
    write_settings(tmp_path, "[memory]\nrevise_enabled = true\n", mode=0o644)
    (tmp_path / ".mnemosyne").chmod(0o755)
    assert load(tmp_path).revise is True


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        (SafeFileReason.UNREADABLE, "unreadable"),
        (SafeFileReason.CHANGED, "source_changed"),
        (SafeFileReason.UNSAFE_PATH, "unsafe_path"),
        (SafeFileReason.NOT_REGULAR, "not_regular"),
        (SafeFileReason.TOO_LARGE, "too_large"),
        (SafeFileReason.UNSAFE_PERMISSIONS, "unsafe_permissions"),
    ],
)
def test_safe_reader_failures_map_to_stable_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reason: SafeFileReason, code: str
) -> None:
    # Running as root makes a real unreadable file impossible; the mapping is what we own.
    def failing(path: Path, *_args: object, **_kwargs: object) -> bytes:
        raise SafeFileError(reason, path)

    monkeypatch.setattr(_settings, "read_safe_file", failing)
    assert code_of(tmp_path) == code


def test_logs_never_echo_values_or_paths_and_the_terminal_text_names_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    value = "sekrit-VALUE-42"
    caplog.set_level(logging.DEBUG)
    with pytest.raises(MnemosyneSettingsError) as info:
        load(tmp_path, {GATE_VARIABLES["remember"]: value})
    path = write_settings(tmp_path, f'# gates\n[memory]\nremember_enabled = "{value}"\n')
    with pytest.raises(MnemosyneSettingsError) as file_info:
        load(tmp_path)
    for error in (info.value, file_info.value):
        assert value not in error.message
        assert str(tmp_path) not in error.message
    assert str(info.value) == (
        "$MNEMOSYNE_MEMORY_REMEMBER_ENABLED: Mnemosyne setting in the environment is invalid: "
        f'expected exactly true or false, got "{value}" (a string) (code=invalid_environment)'
    )
    assert str(file_info.value) == (
        f"{path}:3:1: memory.remember_enabled: Mnemosyne settings file does not match its "
        f'schema: expected true or false, got "{value}" (a string) (code=invalid_schema)'
    )
    assert value not in caplog.text
    assert str(tmp_path) not in caplog.text
    assert "code=invalid_schema" in caplog.text


def test_a_bad_candidate_limit_variable_is_named_with_the_range(tmp_path: Path) -> None:
    with pytest.raises(MnemosyneSettingsError) as info:
        load(tmp_path, {LIMIT_VARIABLE: "1e6"})
    assert info.value.location.source == f"${LIMIT_VARIABLE}"
    assert info.value.detail == (
        'expected an integer from 1 to 1000000 in plain digits, got "1e6" (a string)'
    )


def test_a_toml_error_in_the_settings_file_names_line_and_column(tmp_path: Path) -> None:
    path = write_settings(tmp_path, "[memory]\nremember_enabled = yes\n")
    with pytest.raises(MnemosyneSettingsError) as info:
        load(tmp_path)
    assert info.value.code == "invalid_toml"
    assert (info.value.location.source, info.value.location.line) == (str(path), 2)


def test_a_byte_that_is_no_utf8_is_named_with_its_line_value_and_offset(tmp_path: Path) -> None:
    path = write_settings(tmp_path, b"[memory]\nremember_enabled = true\n# caf\xe9\n")
    with pytest.raises(MnemosyneSettingsError) as info:
        load(tmp_path)
    assert str(info.value) == (
        f"{path}:3: Mnemosyne settings file is not valid UTF-8 TOML: byte 0xe9 at offset 38 "
        "is not UTF-8 (code=invalid_toml)"
    )


# --- memory root ---------------------------------------------------------------------------


def test_memory_root_default_and_override(tmp_path: Path) -> None:
    assert memory_root({}, tmp_path) == tmp_path / ".mnemosyne" / "memory"
    assert memory_root({"MNEMOSYNE_MEMORY_ROOT": ""}, tmp_path) == (
        tmp_path / ".mnemosyne" / "memory"
    )
    other = tmp_path / "somewhere" / "else"
    assert memory_root({"MNEMOSYNE_MEMORY_ROOT": str(other)}, tmp_path) == other
    assert not (tmp_path / ".mnemosyne").exists()
    assert not other.exists()


def test_memory_root_expands_home(tmp_path: Path) -> None:
    assert memory_root({"MNEMOSYNE_MEMORY_ROOT": "~"}, tmp_path) == tmp_path
    assert memory_root({"MNEMOSYNE_MEMORY_ROOT": "~/notes/mem"}, tmp_path) == (
        tmp_path / "notes" / "mem"
    )
    assert memory_root({"MNEMOSYNE_MEMORY_ROOT": "~/x", "HOME": str(tmp_path)}) == tmp_path / "x"
    assert memory_root({"HOME": str(tmp_path)}) == tmp_path / ".mnemosyne" / "memory"


def test_memory_root_is_resolved_on_every_call(tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    first = memory_root(environ, tmp_path)
    environ["MNEMOSYNE_MEMORY_ROOT"] = str(tmp_path / "moved")
    assert memory_root(environ, tmp_path) == tmp_path / "moved" != first


def test_memory_root_rejects_nul(tmp_path: Path) -> None:
    with pytest.raises(MnemosyneSettingsError) as info:
        memory_root({"MNEMOSYNE_MEMORY_ROOT": "/tmp/a\x00b"}, tmp_path)
    assert info.value.code == "invalid_environment"


@pytest.mark.parametrize("root", ["rel", "./rel", "rel/../x", "memory"])
def test_a_relative_memory_root_is_refused_at_startup(tmp_path: Path, root: str) -> None:
    # It would name another directory for each directory the server starts in.
    with pytest.raises(MnemosyneSettingsError) as info:
        load(tmp_path, {"MNEMOSYNE_MEMORY_ROOT": root})
    assert info.value.code == "invalid_environment"
    assert str(info.value.location.source) == "$MNEMOSYNE_MEMORY_ROOT"
    assert "relative path" in str(info.value)


@pytest.mark.parametrize("root", ["/abs/memory", "~/memory", "~"])
def test_an_absolute_or_home_relative_memory_root_is_taken(tmp_path: Path, root: str) -> None:
    assert load(tmp_path, {"MNEMOSYNE_MEMORY_ROOT": root}) == load(tmp_path)

"""Mnemosyne's own operator settings: mutation gates, the candidate bound and the memory root.

Settings come from the environment and from the optional ``~/.mnemosyne/config.toml``;
each environment variable overrides its own key. They are resolved once at startup,
except the memory root, which `memory_root` resolves afresh for every operation.

Every failure raises `MnemosyneSettingsError` with a stable code and a fixed message,
which is all a log line carries. For the operator's terminal the error also names the
environment variable or the file, key, line and column, and what was expected.
"""

from __future__ import annotations

import logging
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mymcp._safefile import SafeFileError, SafeFileReason, as_error, read_safe_file
from mymcp.config import (
    home_directory,
    key_position,
    toml_error_position,
    undecodable_position,
    xdg_directory,
)
from mymcp.errors import NOWHERE, ConfigurationError, Location, MnemosyneSettingsError, found
from mymcp.plugins.mnemosyne.memory import CANDIDATE_LIMIT_DEFAULT, CANDIDATE_LIMIT_MAX

__all__ = [
    "CANDIDATE_LIMIT_ENV",
    "GATE_ENVIRONMENT",
    "KNOWN_VARIABLES",
    "MAX_SETTINGS_BYTES",
    "MEMORY_ROOT_ENV",
    "MnemosyneSettings",
    "index_snapshot_directory",
    "load_mnemosyne_settings",
    "memory_root",
    "parse_candidate_limit",
    "parse_gate_value",
    "parse_settings_document",
    "settings_path",
    "unknown_variables",
    "VARIABLE_PREFIX",
]

_log = logging.getLogger("mymcp.mnemosyne.settings")

MAX_SETTINGS_BYTES: Final = 16 * 1024
SETTINGS_DIRECTORY: Final = ".mnemosyne"
SETTINGS_FILE: Final = "config.toml"
MEMORY_ROOT_ENV: Final = "MNEMOSYNE_MEMORY_ROOT"
CANDIDATE_LIMIT_ENV: Final = "MNEMOSYNE_MEMORY_CANDIDATE_LIMIT"
CANDIDATE_LIMIT_KEY: Final = "candidate_limit"

# Settings field -> (environment variable, key in the file's [memory] table).
GATE_ENVIRONMENT: Final[Mapping[str, tuple[str, str]]] = {
    "remember": ("MNEMOSYNE_MEMORY_REMEMBER_ENABLED", "remember_enabled"),
    "archive_restore": ("MNEMOSYNE_MEMORY_ARCHIVE_RESTORE_ENABLED", "archive_restore_enabled"),
    "revise": ("MNEMOSYNE_MEMORY_REVISE_ENABLED", "revise_enabled"),
    "forget": ("MNEMOSYNE_MEMORY_FORGET_ENABLED", "forget_enabled"),
}
KNOWN_VARIABLES: Final = (
    MEMORY_ROOT_ENV,
    CANDIDATE_LIMIT_ENV,
    *(variable for variable, _ in GATE_ENVIRONMENT.values()),
)
VARIABLE_PREFIX: Final = "MNEMOSYNE_MEMORY_"
_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9_]{1,80}")
_FILE_KEYS: Final = frozenset({*(key for _, key in GATE_ENVIRONMENT.values()), CANDIDATE_LIMIT_KEY})
# No sign, no blanks, no leading zeros; seven digits already exceed the maximum, so the
# length bound keeps int() away from huge inputs.
_DECIMAL: Final = re.compile(r"[1-9][0-9]{0,6}")

_GATE_VALUES: Final = "expected exactly true or false"
_LIMIT_VALUES: Final = f"expected an integer from 1 to {CANDIDATE_LIMIT_MAX} in plain digits"


def _error(
    code: str, location: Location = NOWHERE, detail: str | None = None
) -> MnemosyneSettingsError:
    return MnemosyneSettingsError(code, location=location, detail=detail)


def _no_home() -> MnemosyneSettingsError:
    return _error(
        "unsafe_path", Location(source="$HOME"), "no absolute home directory is known; set HOME"
    )


@dataclass(frozen=True, slots=True)
class MnemosyneSettings:
    """The startup snapshot: four independent mutation gates and the candidate bound.

    Every gate defaults to off; `archive_restore` enables archive and restore together.
    """

    remember: bool = False
    archive_restore: bool = False
    revise: bool = False
    forget: bool = False
    candidate_limit: int = CANDIDATE_LIMIT_DEFAULT

    def __post_init__(self) -> None:
        for name in GATE_ENVIRONMENT:
            if type(getattr(self, name)) is not bool:
                raise TypeError(f"{name} must be a bool")
        if not _valid_limit(self.candidate_limit):
            raise ValueError("candidate_limit must be an integer from 1 to 1000000")


def _valid_limit(value: object) -> bool:
    return type(value) is int and 1 <= value <= CANDIDATE_LIMIT_MAX


def parse_gate_value(text: str) -> bool | None:
    """`true` -> True, `false` -> False, anything else (case, blanks included) -> None."""
    if text == "true":
        return True
    if text == "false":
        return False
    return None


def parse_candidate_limit(text: str) -> int | None:
    """A plain decimal integer from 1 to 1,000,000, else None."""
    if _DECIMAL.fullmatch(text) is None:
        return None
    value = int(text)
    return value if value <= CANDIDATE_LIMIT_MAX else None


def settings_path(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """``<home>/.mnemosyne/config.toml``; home defaults to ``HOME``, then the account database.

    Raises `MnemosyneSettingsError("unsafe_path")` when no absolute home can be found.
    """
    resolved = home_directory(environ, home)
    if resolved is None:
        raise _no_home()
    return resolved / SETTINGS_DIRECTORY / SETTINGS_FILE


def memory_root(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """The memory root for one operation: ``MNEMOSYNE_MEMORY_ROOT`` or ``~/.mnemosyne/memory``.

    A leading ``~`` in the variable is expanded; an empty variable counts as unset. The
    environment is read on every call and nothing is created or probed. Raises
    `MnemosyneSettingsError("invalid_environment")` for a value holding NUL and
    ``("unsafe_path")`` when a home directory is needed but cannot be found.
    """
    env = os.environ if environ is None else environ
    value = env.get(MEMORY_ROOT_ENV, "")
    if "\x00" in value:
        raise _error(
            "invalid_environment", Location(source=f"${MEMORY_ROOT_ENV}"), "the value holds NUL"
        )
    if value and not value.startswith("~"):
        return Path(value)
    if value.startswith("~") and value != "~" and not value.startswith("~/"):
        # ``~user/...``: only the account database knows that home.
        expanded = os.path.expanduser(value)
        if expanded.startswith("~"):
            raise _error(
                "unsafe_path",
                Location(source=f"${MEMORY_ROOT_ENV}"),
                f"no account is named by {value.split('/', 1)[0]!r}",
            )
        return Path(expanded)
    resolved = home_directory(env, home)
    if resolved is None:
        raise _no_home()
    if not value:
        return resolved / SETTINGS_DIRECTORY / "memory"
    return resolved / value[2:]


def unknown_variables(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The `MNEMOSYNE_MEMORY_*` variables that name no setting (a misspelling is
    otherwise silently ignored), sorted."""
    env = os.environ if environ is None else environ
    return tuple(
        sorted(
            name for name in env if name.startswith(VARIABLE_PREFIX) and name not in KNOWN_VARIABLES
        )
    )


def index_snapshot_directory(
    environ: Mapping[str, str] | None = None, home: Path | None = None
) -> Path | None:
    """Where the memory index keeps its snapshot: ``$XDG_CACHE_HOME/mymcp``.

    ``XDG_CACHE_HOME`` counts only when it is an absolute path; otherwise the cache is
    ``~/.cache/mymcp``. None when no home can be found (then no snapshot is kept). The
    snapshot only speeds up the first call after a start; the files stay the truth.
    """
    try:
        return xdg_directory("XDG_CACHE_HOME", environ, home)
    except ConfigurationError:
        return None


def _environment_overrides(
    env: Mapping[str, str],
) -> tuple[dict[str, bool], int | None]:
    gates: dict[str, bool] = {}
    for name, (variable, _) in GATE_ENVIRONMENT.items():
        if variable in env:
            parsed = parse_gate_value(env[variable])
            if parsed is None:
                detail = f"{_GATE_VALUES}, got {found(env[variable])}"
                raise _error("invalid_environment", Location(source=f"${variable}"), detail)
            gates[name] = parsed
    limit = None
    if CANDIDATE_LIMIT_ENV in env:
        limit = parse_candidate_limit(env[CANDIDATE_LIMIT_ENV])
        if limit is None:
            detail = f"{_LIMIT_VALUES}, got {found(env[CANDIDATE_LIMIT_ENV])}"
            raise _error("invalid_environment", Location(source=f"${CANDIDATE_LIMIT_ENV}"), detail)
    return gates, limit


def parse_settings_document(data: bytes, source: Path | None = None) -> dict[str, Any]:
    """Validate the file's bytes and return its ``[memory]`` values keyed by settings field.

    Errors name `source`, and the line and key at fault.
    """
    where = Location(source=None if source is None else str(source))
    if len(data) > MAX_SETTINGS_BYTES:
        raise _error("too_large", where)
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        complaint, position = undecodable_position(data, exc)
        raise _error("invalid_toml", position.filled(where), complaint) from None
    try:
        # tomllib already rejects duplicate keys and redefined tables.
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        complaint, position = toml_error_position(exc, text)
        raise _error("invalid_toml", position.filled(where), complaint) from None
    except (ValueError, RecursionError) as exc:
        raise _error("invalid_toml", where, type(exc).__name__) from None

    def invalid(key: str, detail: str) -> MnemosyneSettingsError:
        written = key_position(text, key)
        line, column = written if written is not None else (None, None)
        return _error("invalid_schema", Location(where.source, key, line, column), detail)

    takes = ", ".join(sorted(_FILE_KEYS))
    unknown = sorted(document.keys() - {"memory"})
    if unknown:
        raise invalid(unknown[0], "unknown key; the file holds only an optional [memory] table")
    table = document.get("memory", {})
    if type(table) is not dict:
        raise invalid("memory", f"expected a table, got {found(table)}")
    unknown = sorted(table.keys() - _FILE_KEYS)
    if unknown:
        raise invalid(f"memory.{unknown[0]}", f"unknown key; [memory] takes {takes}")
    values: dict[str, Any] = {}
    for name, (_, key) in GATE_ENVIRONMENT.items():
        if key in table:
            if type(table[key]) is not bool:
                raise invalid(f"memory.{key}", f"expected true or false, got {found(table[key])}")
            values[name] = table[key]
    if CANDIDATE_LIMIT_KEY in table:
        limit = table[CANDIDATE_LIMIT_KEY]
        if not _valid_limit(limit):
            detail = f"expected an integer from 1 to {CANDIDATE_LIMIT_MAX}, got {found(limit)}"
            raise invalid(f"memory.{CANDIDATE_LIMIT_KEY}", detail)
        values["candidate_limit"] = limit
    return values


def _read_file(environ: Mapping[str, str], home: Path | None) -> dict[str, Any] | None:
    path = settings_path(environ, home)
    try:
        data = read_safe_file(path, max_bytes=MAX_SETTINGS_BYTES)
    except SafeFileError as exc:
        if exc.reason is SafeFileReason.MISSING:
            return None
        raise as_error(exc, MnemosyneSettingsError) from None
    return parse_settings_document(data, path)


def _refuse_relative_root(env: Mapping[str, str]) -> None:
    """A relative root would name another directory for every directory the server
    happens to start in: refused at startup, before any file is written there."""
    value = env.get(MEMORY_ROOT_ENV, "")
    if (
        value
        and not value.startswith("~")
        and "\x00" not in value
        and not Path(value).is_absolute()
    ):
        raise _error(
            "invalid_environment",
            Location(source=f"${MEMORY_ROOT_ENV}"),
            f"{value[:200]!r} is a relative path, which depends on the directory the server "
            "starts in; give an absolute one",
        )


def load_mnemosyne_settings(
    environ: Mapping[str, str] | None = None, home: Path | None = None
) -> MnemosyneSettings:
    """Resolve the startup settings.

    All environment values are parsed first, so an invalid one fails before any file
    access. The settings file is read at most once, and only when some value is still
    unresolved (it is skipped when all five variables are set); a missing file or
    directory means defaults. Anything still unresolved defaults to off / `CANDIDATE_LIMIT_DEFAULT`.
    """
    env = os.environ if environ is None else environ
    for name in unknown_variables(env):
        # The name only, never the value; a name that is not plain text is not shown.
        shown = name if _PLAIN_NAME.fullmatch(name) else "?"
        _log.warning("mnemosyne_settings outcome=unknown_variable name=%s", shown)
    try:
        _refuse_relative_root(env)
        gates, limit = _environment_overrides(env)
        source = "environment"
        file_values: dict[str, Any] = {}
        if len(gates) < len(GATE_ENVIRONMENT) or limit is None:
            read = _read_file(env, home)
            source = "defaults" if read is None else "file"
            file_values = read or {}
    except MnemosyneSettingsError as exc:
        _log.error("mnemosyne_settings outcome=error code=%s", exc.code)
        raise
    merged: dict[str, Any] = {**file_values, **gates}
    if limit is not None:
        merged["candidate_limit"] = limit
    settings = MnemosyneSettings(**merged)
    _log.info(
        "mnemosyne_settings outcome=loaded source=%s remember=%s archive_restore=%s "
        "revise=%s forget=%s candidate_limit=%d",
        source,
        str(settings.remember).lower(),
        str(settings.archive_restore).lower(),
        str(settings.revise).lower(),
        str(settings.forget).lower(),
        settings.candidate_limit,
    )
    return settings

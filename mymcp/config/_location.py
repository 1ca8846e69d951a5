"""Where MyMCP's files live: the home directory and the XDG base directories, one rule
for every OS and every caller (host configuration, audit, console, Mnemosyne)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from mymcp.errors import ConfigurationError, Location

__all__ = [
    "CONFIG_DIRECTORY_NAME",
    "CONFIG_FILE_NAME",
    "config_path",
    "home_directory",
    "xdg_directory",
]

CONFIG_DIRECTORY_NAME = "mymcp"
CONFIG_FILE_NAME = "config.toml"


def _is_clean(text: str) -> bool:
    """False for text holding NUL or lone surrogates (not representable as a real path)."""
    return "\x00" not in text and not any(0xD800 <= ord(char) <= 0xDFFF for char in text)


def home_directory(
    environ: Mapping[str, str] | None = None, home: Path | None = None
) -> Path | None:
    """The home directory: `home` if given, else `HOME`, else the account database.

    None when the result is empty, not absolute, or holds NUL or lone surrogates.
    """
    if home is not None:
        text = str(home)
    else:
        text = (os.environ if environ is None else environ).get("HOME", "")
        if not text:
            text = _account_home()
    if not text or not _is_clean(text) or not Path(text).is_absolute():
        return None
    return Path(text)


def _account_home() -> str:
    if os.name == "posix":
        import pwd

        try:
            return pwd.getpwuid(os.getuid()).pw_dir
        except (KeyError, OSError):
            return ""
    try:
        return str(Path.home())
    except (RuntimeError, KeyError, OSError):
        return ""


_XDG_DEFAULTS = {
    "XDG_CONFIG_HOME": (".config",),
    "XDG_STATE_HOME": (".local", "state"),
    "XDG_CACHE_HOME": (".cache",),
}


def xdg_directory(
    variable: str, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> Path:
    """MyMCP's directory under one XDG base directory (`mymcp` inside it).

    The variable's value when it is non-empty and absolute, otherwise its documented
    default under the home directory (`~/.config`, `~/.local/state`, `~/.cache`). Nothing
    is expanded, probed or merged. Raises `ConfigurationError("invalid_location")` for NUL
    or surrogate code points, or when no absolute home directory can be found.
    """
    env = os.environ if environ is None else environ
    xdg = env.get(variable, "")
    if not _is_clean(xdg):
        raise ConfigurationError(
            "invalid_location",
            location=Location(source=f"${variable}"),
            detail="the value holds NUL or an unpaired surrogate",
        )
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / CONFIG_DIRECTORY_NAME
    resolved = home_directory(env, home)
    if resolved is None:
        raise ConfigurationError(
            "invalid_location",
            location=Location(source="$HOME"),
            detail=f"no absolute home directory is known, and ${variable} is not an absolute path",
        )
    return resolved.joinpath(*_XDG_DEFAULTS[variable], CONFIG_DIRECTORY_NAME)


def config_path(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """The configuration file: `$XDG_CONFIG_HOME/mymcp/config.toml`, by default
    `~/.config/mymcp/config.toml` (see `xdg_directory`)."""
    return xdg_directory("XDG_CONFIG_HOME", environ, home) / CONFIG_FILE_NAME

"""Where the host configuration file lives: one XDG rule, the same on every OS."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from mymcp.config._grammar import config_error

__all__ = ["CONFIG_DIRECTORY_NAME", "CONFIG_FILE_NAME", "config_path", "xdg_directory"]

CONFIG_DIRECTORY_NAME = "mymcp"
CONFIG_FILE_NAME = "config.toml"


def _is_clean(text: str) -> bool:
    """False for text holding NUL or lone surrogates (not representable as a real path)."""
    return "\x00" not in text and not any(0xD800 <= ord(char) <= 0xDFFF for char in text)


def _resolve_home(environ: Mapping[str, str]) -> str:
    value = environ.get("HOME", "")
    if value:
        return value
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
    is expanded, probed or merged. `home` defaults to `HOME` from `environ`, then the
    account database. Raises `ConfigurationError("invalid_location")` for NUL or
    surrogate code points, or when no absolute home directory can be found.
    """
    env = os.environ if environ is None else environ
    xdg = env.get(variable, "")
    if not _is_clean(xdg):
        raise config_error("invalid_location")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / CONFIG_DIRECTORY_NAME
    home_text = str(home) if home is not None else _resolve_home(env)
    if not home_text or not _is_clean(home_text) or not Path(home_text).is_absolute():
        raise config_error("invalid_location")
    return Path(home_text).joinpath(*_XDG_DEFAULTS[variable], CONFIG_DIRECTORY_NAME)


def config_path(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """The configuration file: `$XDG_CONFIG_HOME/mymcp/config.toml`, by default
    `~/.config/mymcp/config.toml` (see `xdg_directory`)."""
    return xdg_directory("XDG_CONFIG_HOME", environ, home) / CONFIG_FILE_NAME

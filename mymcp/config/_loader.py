"""Read the host configuration once, safely, and report the outcome without content."""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from mymcp._safefile import SafeFileError, SafeFileReason, read_safe_file
from mymcp.config._grammar import BUNDLED_PLUGIN_ID, MAX_CONFIGURATION_BYTES, config_error
from mymcp.config._location import config_path
from mymcp.config._model import HostConfiguration
from mymcp.config._schema import host_configuration_from_document
from mymcp.errors import ConfigurationError

__all__ = ["load_host_configuration", "parse_host_configuration", "validate_semantics"]

_log = logging.getLogger("mymcp.host.configuration")

_SAFE_FILE_CODES: Final[dict[SafeFileReason, str]] = {
    SafeFileReason.UNSAFE_PATH: "unsafe_path",
    SafeFileReason.NOT_REGULAR: "not_regular",
    SafeFileReason.UNSAFE_PERMISSIONS: "unsafe_permissions",
    SafeFileReason.UNREADABLE: "unreadable",
    SafeFileReason.TOO_LARGE: "too_large",
    SafeFileReason.CHANGED: "source_changed",
}


def parse_host_configuration(data: bytes) -> HostConfiguration:
    """Validate configuration bytes: strict UTF-8, TOML, then the schema matrix.

    Does not log and does not run the semantic pass (see `validate_semantics`).
    """
    if len(data) > MAX_CONFIGURATION_BYTES:
        raise config_error("too_large")
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise config_error("invalid_utf8") from None
    try:
        document = tomllib.loads(text)
    except (ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        raise config_error("invalid_toml") from None
    return host_configuration_from_document(document)


def _read(environ: Mapping[str, str] | None, home: Path | None) -> HostConfiguration:
    path = config_path(environ, home)
    try:
        data = read_safe_file(path, max_bytes=MAX_CONFIGURATION_BYTES)
    except SafeFileError as exc:
        if exc.reason is SafeFileReason.MISSING:
            return HostConfiguration(origin="absent_defaults")
        raise config_error(_SAFE_FILE_CODES[exc.reason]) from None
    return parse_host_configuration(data)


def load_host_configuration(
    environ: Mapping[str, str] | None = None, home: Path | None = None
) -> HostConfiguration:
    """Load the host configuration from its XDG location (see `config_path`).

    A missing `mymcp` directory or `config.toml` yields the immutable defaults with
    origin `absent_defaults`. Every failure raises `ConfigurationError` with a stable code.
    The outcome is logged on `mymcp.host.configuration` without paths or content.
    """
    try:
        config = _read(environ, home)
    except ConfigurationError as exc:
        _log.error("host_configuration outcome=error code=%s", exc.code)
        raise
    _log.info(
        "host_configuration outcome=%s schema_version=%d address=%s port=%d "
        "declarations=%d enabled=%d",
        config.origin,
        config.schema_version,
        config.server.address,
        config.server.port,
        len(config.plugins),
        sum(1 for plugin in config.plugins if plugin.enabled),
    )
    return config


def _semantic_error(config: HostConfiguration) -> ConfigurationError | None:
    seen: set[str] = set()
    for plugin in config.plugins:
        if plugin.id == BUNDLED_PLUGIN_ID:
            return config_error("bundled_plugin_conflict", "plugins.id")
        if plugin.id in seen:
            return config_error("duplicate_plugin", "plugins.id")
        seen.add(plugin.id)
        if not plugin.enabled:
            continue
        if config.schema_version == 1:
            return config_error("enabled_plugin_unsupported", "plugins.enabled")
        if plugin.manifest_path is None or plugin.module is None:
            return config_error("invalid_schema", "plugins")
    return None


def validate_semantics(config: HostConfiguration) -> None:
    """The bootstrap-time semantic pass over an already loaded configuration.

    Schema 1 may declare plugins but not enable them (`enabled_plugin_unsupported`);
    plugin ids must be unique and must not claim the bundled plugin's id. Failures are
    logged on `mymcp.host.configuration` like load failures.
    """
    error = _semantic_error(config)
    if error is not None:
        _log.error("host_configuration outcome=error code=%s", error.code)
        raise error

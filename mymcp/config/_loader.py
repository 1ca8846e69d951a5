"""Read the host configuration once, safely, and report the outcome.

Logs carry the outcome and a code, never a path or content. The error raised for the
operator's terminal names the file, the key path, and the line and column: `tomllib`
reports them for syntax errors, and for a schema error the key's line is found in the
text.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from mymcp._safefile import SafeFileError, SafeFileReason, as_error, read_safe_file
from mymcp.config._grammar import BUNDLED_PLUGIN_ID, MAX_CONFIGURATION_BYTES
from mymcp.config._location import config_path
from mymcp.config._model import HostConfiguration
from mymcp.config._schema import host_configuration_from_document
from mymcp.errors import ConfigurationError, Location, MyMCPError, key_path

__all__ = [
    "key_position",
    "load_host_configuration",
    "locate_in_configuration",
    "parse_host_configuration",
    "toml_error_position",
    "undecodable_position",
    "validate_semantics",
]

_log = logging.getLogger("mymcp.host.configuration")

_TOML_POSITION: Final = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_TOML_END: Final = re.compile(r"\s*\(at end of document\)$")


def toml_error_position(error: tomllib.TOMLDecodeError, text: str) -> tuple[str, Location]:
    """`tomllib`'s complaint without its position suffix, and the position as a location.
    A key it writes as a Python tuple (`('server',)`) is written as TOML writes it
    (`server`), and a value given twice names its key."""
    message = str(error)
    match = _TOML_POSITION.search(message)
    if match is not None:
        position = Location(line=int(match[1]), column=int(match[2]))
        message = message[: match.start()]
    else:
        end = _TOML_END.search(message)
        position = Location(line=text.count("\n") + 1) if end is not None else Location()
        message = message[: end.start()] if end is not None else message
    message = _KEY_TUPLE.sub(_dotted_key, message)
    if message == "Cannot overwrite a value" and position.line is not None:
        written = [path for path, line, _ in _key_lines(text) if line == position.line]
        if written:
            message = (
                f"{key_path(written[-1])} conflicts with a value set before: a key takes "
                "one value, and a key given a value holds no keys"
            )
    return message, position


# How tomllib names a key in a complaint: the tuple of its parts, as Python prints it.
_KEY_TUPLE: Final = re.compile(r"""\((?:'[^'\\]*'|"[^"\\]*")(?:, (?:'[^'\\]*'|"[^"\\]*"))*,?\)""")


def _dotted_key(match: re.Match[str]) -> str:
    return key_path(ast.literal_eval(match.group()))


def undecodable_position(data: bytes, error: UnicodeDecodeError) -> tuple[str, Location]:
    """The complaint about the first byte of `data` that is no UTF-8, and its line as a
    location."""
    complaint = f"byte 0x{data[error.start]:02x} at offset {error.start} is not UTF-8"
    return complaint, Location(line=data[: error.start].count(b"\n") + 1)


_KEY_PART: Final = r"""(?:[A-Za-z0-9_-]+|"[^"\\]*"|'[^']*')"""
_DOTTED_KEY: Final = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_HEADER: Final = re.compile(rf"\s*(\[\[?)\s*({_DOTTED_KEY})\s*\]\]?\s*(?:#.*)?$")
_ASSIGNMENT: Final = re.compile(rf"\s*({_DOTTED_KEY})\s*=")
_PATH_PART: Final = re.compile(r"([^.\[\]]+)|\[(\d+)\]")

_Path = tuple[str | int, ...]


def _key_parts(dotted: str) -> list[str]:
    return [part.strip("\"'") for part in re.findall(_KEY_PART, dotted)]


def _key_lines(text: str) -> list[tuple[_Path, int, int]]:
    """(key path, line, column) of every table header and `key =` line, best effort: it
    follows headers and arrays of tables and skips multi-line strings."""
    found: list[tuple[_Path, int, int]] = []
    arrays: dict[tuple[str, ...], int] = {}
    table: _Path = ()
    in_string = False
    # Lines as TOML counts them (only line feeds end one): `splitlines` would also
    # break at U+2028 or U+0085, which a comment may hold, and miscount every line after.
    for number, line in enumerate(text.split("\n"), start=1):
        if in_string:
            in_string = (line.count('"""') + line.count("'''")) % 2 == 0
            continue
        header = _HEADER.match(line)
        if header is not None:
            names = _key_parts(header[2])
            is_array = header[1] == "[["
            if is_array:
                arrays[tuple(names)] = arrays.get(tuple(names), -1) + 1
            path: list[str | int] = []
            for position, name in enumerate(names):
                path.append(name)
                prefix = tuple(names[: position + 1])
                if prefix in arrays and (is_array or position < len(names) - 1):
                    path.append(arrays[prefix])
            table = tuple(path)
            found.append((table, number, line.index("[") + 1))
            continue
        assignment = _ASSIGNMENT.match(line)
        if assignment is not None:
            found.append(
                (table + tuple(_key_parts(assignment[1])), number, assignment.start(1) + 1)
            )
            in_string = (line.count('"""') + line.count("'''")) % 2 == 1
    return found


def key_position(text: str, key: str) -> tuple[int, int] | None:
    """The line and column where key path `key` (`plugins[1].module`) is written, or of
    the nearest enclosing key or table that is; None when nothing of it is written."""
    target: _Path = tuple(int(index) if index else name for name, index in _PATH_PART.findall(key))
    best: tuple[int, int, int] | None = None
    for path, line, column in _key_lines(text):
        encloses = len(path) <= len(target) and target[: len(path)] == path
        if encloses and (best is None or len(path) > best[0]):
            best = (len(path), line, column)
    if best is None:
        return None
    depth, line, column = best
    last = target[-1] if target else None
    if depth < len(target) and isinstance(last, str):
        # A key inside an inline table, such as `route = { scheme = "x" }`.
        written = text.split("\n")[line - 1]
        inner = re.compile(rf"[{{,]\s*({re.escape(last)})\s*=").search(written, column)
        if inner is not None:
            column = inner.start(1) + 1
    elif depth == len(target) - 1 and isinstance(last, int):
        # An element of an array written on the key's line, such as `allow = ["a", "b"]`.
        column = _element_column(text.split("\n")[line - 1], column, last) or column
    return line, column


def _element_column(line: str, start: int, wanted: int) -> int | None:
    """The column of element `wanted` of the array that follows `=` on `line` (the key
    at column `start`), when that element begins on this line."""
    equals = line.find("=", start - 1)
    position = line.find("[", equals) if equals >= 0 else -1
    if position < 0:
        return None
    depth, index, expecting, quote = 0, 0, False, ""
    while position < len(line):
        char = line[position]
        if quote:
            if char == "\\" and quote == '"':
                position += 1
            elif char == quote:
                quote = ""
        elif char == "#":
            return None
        elif expecting and char not in " \t,]":
            if index == wanted:
                return position + 1
            expecting = False
            continue  # the element's first character still opens a string or array
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
            expecting = depth == 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return None
        elif char == "," and depth == 1:
            index += 1
            expecting = True
        position += 1
    return None


def locate_in_configuration(error: MyMCPError, source: Path | None) -> None:
    """Name the configuration file `source` in `error`, with the line and column of the
    error's key: for a fault found only after loading (a policy naming a tool that does
    not exist, a plugin's values against its manifest's schema), the file is read again
    for the position. Without `source` (built-in defaults) nothing changes."""
    if source is None:
        return
    where = Location(source=str(source))
    if error.location.key and error.location.line is None:
        try:
            text = read_safe_file(source, max_bytes=MAX_CONFIGURATION_BYTES).decode("utf-8")
        except (SafeFileError, UnicodeDecodeError):
            text = ""  # it changed since it was loaded: the key path alone must do
        written = key_position(text, error.location.key)
        if written is not None:
            where = Location(where.source, line=written[0], column=written[1])
    error.locate(where)


def parse_host_configuration(data: bytes, source: Path | None = None) -> HostConfiguration:
    """Validate configuration bytes: strict UTF-8, TOML, then the schema matrix.

    `source` is the file the bytes came from; errors name it. Does not log and does not
    run the semantic pass (see `validate_semantics`).
    """
    where = Location(source=None if source is None else str(source))
    if len(data) > MAX_CONFIGURATION_BYTES:
        raise ConfigurationError("too_large", location=where)
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        complaint, position = undecodable_position(data, exc)
        raise ConfigurationError(
            "invalid_utf8", location=position.filled(where), detail=complaint
        ) from None
    if text.startswith("\ufeff"):
        # Some editors save one; the TOML parser's own complaint would not name it.
        raise ConfigurationError(
            "invalid_toml",
            location=Location(where.source, line=1, column=1),
            detail="the file starts with a byte-order mark (U+FEFF), which TOML does not "
            "allow: save it as UTF-8 without one",
        )
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        complaint, position = toml_error_position(exc, text)
        raise ConfigurationError(
            "invalid_toml", location=position.filled(where), detail=complaint
        ) from None
    except RecursionError:
        raise ConfigurationError(
            "invalid_toml", location=where, detail="values nest too deeply"
        ) from None
    except ValueError:  # an integer of more digits than Python converts
        # Python's own words suggest raising its limit; the operator's fix is the number.
        limit = sys.get_int_max_str_digits()
        run = re.search(rf"[0-9_]{{{limit + 1},}}", text)
        position = (
            Location() if run is None else Location(line=text.count("\n", 0, run.start()) + 1)
        )
        raise ConfigurationError(
            "invalid_toml",
            location=position.filled(where),
            detail=f"an integer has more than {limit} digits",
        ) from None
    try:
        return host_configuration_from_document(document)
    except ConfigurationError as exc:
        written = key_position(text, exc.location.key or "")
        if written is not None:
            where = Location(where.source, line=written[0], column=written[1])
        exc.locate(where)
        raise


def _read(environ: Mapping[str, str] | None, home: Path | None) -> HostConfiguration:
    path = config_path(environ, home)
    try:
        data = read_safe_file(path, max_bytes=MAX_CONFIGURATION_BYTES)
    except SafeFileError as exc:
        if exc.reason is SafeFileReason.MISSING:
            return HostConfiguration(origin="absent_defaults")
        raise as_error(exc, ConfigurationError) from None
    return dataclasses.replace(parse_host_configuration(data, path), source=path)


def load_host_configuration(
    environ: Mapping[str, str] | None = None, home: Path | None = None
) -> HostConfiguration:
    """Load the host configuration from its XDG location (see `config_path`).

    A missing `mymcp` directory or `config.toml` yields the immutable defaults with
    origin `absent_defaults`; a `mymcp` directory that is unsafe (writable by group or
    others, or owned by a user other than us or root) is refused even without a file,
    since whoever can write there could add one. Every failure raises
    `ConfigurationError` with a stable code (`unsafe_permissions` for a mode or an owner).
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
    for index, plugin in enumerate(config.plugins):
        where = f"plugins[{index}]"
        if plugin.id == BUNDLED_PLUGIN_ID:
            return ConfigurationError.at("bundled_plugin_conflict", f"{where}.id")
        if plugin.id in seen:
            return ConfigurationError.at("duplicate_plugin", f"{where}.id")
        seen.add(plugin.id)
        if not plugin.enabled:
            continue
        if config.schema_version == 1:
            return ConfigurationError.at(
                "enabled_plugin_unsupported",
                f"{where}.enabled",
                "schema 1 may declare plugins but not enable them; use schema 2 or later "
                "and add manifest_path and module",
            )
        if plugin.manifest_path is None or plugin.module is None:
            return ConfigurationError.at(
                "invalid_schema", where, "an enabled plugin needs manifest_path and module"
            )
    return None


def validate_semantics(config: HostConfiguration) -> None:
    """The bootstrap-time semantic pass over an already loaded configuration.

    Schema 1 may declare plugins but not enable them (`enabled_plugin_unsupported`);
    plugin ids must be unique and must not claim the bundled plugin's id. Failures are
    logged on `mymcp.host.configuration` like load failures.
    """
    error = _semantic_error(config)
    if error is not None:
        locate_in_configuration(error, config.source)
        _log.error("host_configuration outcome=error code=%s", error.code)
        raise error

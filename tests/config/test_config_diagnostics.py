"""What an operator reads on the terminal when the configuration is wrong: the file, the
line and column, the key path, what the key takes and what it holds. Logs stay code-only."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.config import parse_host_configuration
from mymcp.config._loader import key_position
from mymcp.errors import ConfigurationError

FILE = Path("/home/me/.config/mymcp/config.toml")


def _error(text: str) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as caught:
        parse_host_configuration(text.encode(), FILE)
    return caught.value


def test_an_unknown_key_is_named_with_the_keys_its_table_takes() -> None:
    error = _error("schema_version = 8\n[server]\nprot = 8000\n")
    assert str(error) == (
        f"{FILE}:3:1: server.prot: MyMCP configuration does not match its schema: unknown "
        "key; [server] takes address, log_format, log_level, port (code=invalid_schema)"
    )


def test_a_mistyped_value_names_the_expected_type_and_the_value() -> None:
    error = _error('schema_version = 7\n[server]\nport = "8000"\n')
    assert (error.location.line, error.location.column) == (3, 1)
    assert error.detail == "expected an integer from 1 to 65535, got '8000' (a string)"


def test_a_toml_syntax_error_names_line_and_column() -> None:
    error = _error("schema_version = 8\n[server]\nport 8000\n")
    assert error.code == "invalid_toml"
    assert str(error) == (
        f"{FILE}:3:6: MyMCP configuration is not valid TOML: Expected '=' after a key in a "
        "key/value pair (code=invalid_toml)"
    )


def test_invalid_utf8_names_the_line_and_byte() -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_host_configuration(b"schema_version = 8\n# \xff\n", FILE)
    assert caught.value.code == "invalid_utf8"
    assert caught.value.location.line == 2
    assert caught.value.detail == "byte 0xff at offset 21 is not UTF-8"


def test_a_governance_table_under_an_older_schema_says_which_schema() -> None:
    error = _error('schema_version = 7\n[policy]\ndefault = "deny"\n')
    assert (error.location.key, error.location.line) == ("policy", 2)
    assert error.detail == "[policy] needs schema_version = 8"


def test_keys_in_arrays_of_tables_and_inline_tables_are_found() -> None:
    text = (
        "schema_version = 8\n"
        "[[plugins]]\n"
        'id = "a"\n'
        "enabled = false\n"
        'manifest_path = "/p/a.json"\n'
        'module = "a"\n'
        "[[plugins]]\n"
        'id = "b"\n'
        "enabled = false\n"
        'manifest_path = "/p/b.json"\n'
        'module = "1b"\n'
        "[authentication]\n"
        "anonymous_enabled = true\n"
        "[[authentication.adapters]]\n"
        'id = "x"\n'
        'type = "custom"\n'
        "enabled = false\n"
        'route = { source = "authorization", scheme = "Bad" }\n'
    )
    error = _error(text)
    assert (error.location.key, error.location.line) == ("plugins[1].module", 11)
    assert key_position(text, "authentication.adapters[0].route.scheme") == (18, 37)
    assert key_position(text, "authentication.anonymous_enabled") == (13, 1)
    assert key_position(text, "plugins[0].configuration.colour") == (2, 1)
    assert key_position(text, "mcp.strict_protocol_version") is None


def test_multi_line_strings_do_not_fool_the_key_search() -> None:
    text = 'schema_version = 8\nnote = """\nport = 1\n"""\n[server]\nport = 0\n'
    assert key_position(text, "server.port") == (6, 1)


@given(st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=6))
def test_the_reported_line_is_the_line_of_the_broken_key(blank_lines: list[int]) -> None:
    # Tables separated by varying blank lines; the last table holds the bad value.
    lines = ["schema_version = 8"]
    for gap in blank_lines[:-1]:
        lines += [""] * gap
    lines += [""] * blank_lines[-1] + ["[server]", 'address = "127.0.0.1"']
    lines += [""] * blank_lines[0] + ["port = 0"]
    error = _error("\n".join(lines) + "\n")
    assert error.location.key == "server.port"
    assert error.location.line == len(lines)


# --- keys schema 8 adds ---------------------------------------------------------------


def test_schema_8_server_takes_the_logging_keys() -> None:
    config = parse_host_configuration(
        b'schema_version = 8\n[server]\nlog_level = "debug"\nlog_format = "json"\n'
    )
    assert (config.server.log_level, config.server.log_format) == ("debug", "json")
    assert parse_host_configuration(b"schema_version = 8\n").server.log_level == "info"


@pytest.mark.parametrize(
    ("line", "key", "detail"),
    [
        (
            'log_level = "verbose"',
            "server.log_level",
            'expected "debug" or "info" or "warning" or "error", got \'verbose\' (a string)',
        ),
        ("log_format = 1", "server.log_format", 'expected "text" or "json", got 1 (an integer)'),
    ],
)
def test_logging_keys_take_fixed_words(line: str, key: str, detail: str) -> None:
    error = _error(f"schema_version = 8\n[server]\n{line}\n")
    assert (error.location.key, error.detail) == (key, detail)


@pytest.mark.parametrize("version", [1, 2, 7])
def test_logging_keys_need_schema_8(version: int) -> None:
    body = "[authentication]\nanonymous_enabled = true\n" if version >= 3 else ""
    if version >= 6:
        body += (
            "[mcp]\nstrict_protocol_version = true\nsession_inactivity_timeout_seconds = 1\n"
            "session_absolute_lifetime_seconds = 1\n"
        )
    error = _error(f'schema_version = {version}\n[server]\nlog_level = "info"\n{body}')
    assert error.location.key == "server.log_level"


def test_schema_8_plugins_take_a_configuration_table() -> None:
    config = parse_host_configuration(
        b'schema_version = 8\n[[plugins]]\nid = "a"\nenabled = false\n'
        b'manifest_path = "/p/a.json"\nmodule = "a"\n'
        b'[plugins.configuration]\ngreeting = "hi"\nlimits = { max_items = 3 }\n'
    )
    values = config.plugins[0].configuration
    assert values["greeting"] == "hi"
    assert values["limits"]["max_items"] == 3
    with pytest.raises(TypeError):
        values["greeting"] = "changed"  # type: ignore[index]


def test_plugin_configuration_needs_schema_8() -> None:
    error = _error(
        'schema_version = 2\n[[plugins]]\nid = "a"\nenabled = false\n'
        'manifest_path = "/p/a.json"\nmodule = "a"\nconfiguration = {}\n'
    )
    assert (error.location.key, error.location.line) == ("plugins[0].configuration", 7)

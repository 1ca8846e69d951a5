"""What an operator reads on the terminal when the configuration is wrong: the file, the
line and column, the key path, what the key takes and what it holds. Logs stay code-only."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.config import locate_in_configuration, parse_host_configuration
from mymcp.config._loader import key_position
from mymcp.errors import ConfigurationError, Location

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


def test_a_key_of_any_length_is_shown_cut_short() -> None:
    error = _error("schema_version = 8\n[server]\n" + "k" * 60_000 + " = 1\n")
    assert error.location.key == "server." + "k" * 60_000  # kept whole for callers
    assert str(error) == (
        f"{FILE}:3:1: server.{'k' * 193}...: MyMCP configuration does not match its schema: "
        "unknown key; [server] takes address, log_format, log_level, port (code=invalid_schema)"
    )


def test_a_mistyped_value_names_the_expected_type_and_the_value() -> None:
    error = _error('schema_version = 7\n[server]\nport = "8000"\n')
    assert (error.location.line, error.location.column) == (3, 1)
    assert error.detail == 'expected an integer from 1 to 65535, got "8000" (a string)'


def test_a_toml_syntax_error_names_line_and_column() -> None:
    error = _error("schema_version = 8\n[server]\nport 8000\n")
    assert error.code == "invalid_toml"
    assert str(error) == (
        f"{FILE}:3:6: MyMCP configuration is not valid TOML: Expected '=' after a key in a "
        "key/value pair (code=invalid_toml)"
    )


@pytest.mark.parametrize(
    ("text", "line", "detail"),
    [
        (
            "schema_version = 8\n[server]\nport = 8000\nport = 8001\n",
            4,
            "server.port conflicts with a value set before: a key takes one value, and a key "
            "given a value holds no keys",
        ),
        (
            'schema_version = 8\n[[plugins]]\nid = "a"\nenabled = true\nenabled = false\n',
            5,
            "plugins[0].enabled conflicts with a value set before: a key takes one value, and "
            "a key given a value holds no keys",
        ),
        ("schema_version = 8\n[server]\nport = 8000\n[server]\n", 4, "Cannot declare server twice"),
        ('schema_version = 8\n["a b"]\n["a b"]\n', 3, 'Cannot declare "a b" twice'),
        ('schema_version = 8\n["ключ"]\n["ключ"]\n', 3, 'Cannot declare "ключ" twice'),
        (
            # A quoted key stays one key; a line separator in a comment ends no line.
            'schema_version = 8\n# a\u2028b\n[s]\n"a.b" = 1\nc = 1\n"a.b" = 2\n',
            6,
            's."a.b" conflicts with a value set before: a key takes one value, and a key '
            "given a value holds no keys",
        ),
    ],
)
def test_a_key_or_table_given_twice_is_named_as_toml_writes_it(
    text: str, line: int, detail: str
) -> None:
    # Not "Cannot overwrite a value", nor a Python tuple such as ('server',).
    error = _error(text)
    assert error.code == "invalid_toml"
    assert error.location.line == line
    assert error.detail == detail


def test_an_integer_too_long_to_read_names_its_line_and_not_python_s_remedy() -> None:
    error = _error("schema_version = 8\n[server]\nport = " + "1_0" * 2200 + "\n")
    assert error.code == "invalid_toml"
    assert error.location.line == 3
    assert error.detail == "an integer has more than 4300 digits"
    assert "sys." not in str(error)


def test_invalid_utf8_names_the_line_and_byte() -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_host_configuration(b"schema_version = 8\n# \xff\n", FILE)
    assert caught.value.code == "invalid_utf8"
    assert caught.value.location.line == 2
    assert caught.value.detail == "byte 0xff at offset 21 is not UTF-8"


def test_a_byte_order_mark_is_named_as_such() -> None:
    # Some editors save one; "invalid statement" would not tell the operator what to fix.
    error = _error("\ufeffschema_version = 8\n")
    assert error.code == "invalid_toml"
    assert (error.location.line, error.location.column) == (1, 1)
    assert error.detail is not None
    assert "byte-order mark (U+FEFF)" in error.detail


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
            'expected "debug" or "info" or "warning" or "error", got "verbose" (a string)',
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


_PLUGIN = '[[plugins]]\nid = "a"\nenabled = false\nmanifest_path = "/p/a.json"\nmodule = "a"\n'
_AUTHENTICATION = "[authentication]\nanonymous_enabled = true\n"
_MCP_6 = "[mcp]\nstrict_protocol_version = true\n"
_MCP_7 = _MCP_6 + "session_inactivity_timeout_seconds = 1\nsession_absolute_lifetime_seconds = 1\n"


@pytest.mark.parametrize(
    ("text", "key", "introduced"),
    [
        (
            'schema_version = 7\n[server]\nlog_level = "info"\n' + _AUTHENTICATION + _MCP_7,
            "server.log_level",
            8,
        ),
        (
            'schema_version = 7\n[server]\nlog_format = "json"\n' + _AUTHENTICATION + _MCP_7,
            "server.log_format",
            8,
        ),
        (
            'schema_version = 1\n[[plugins]]\nid = "a"\nenabled = false\nmodule = "a"\n',
            "plugins[0].module",
            2,
        ),
        (
            'schema_version = 1\n[[plugins]]\nid = "a"\nenabled = false\nmanifest_path = "/a"\n',
            "plugins[0].manifest_path",
            2,
        ),
        (
            "schema_version = 7\n"
            + _AUTHENTICATION
            + _MCP_7
            + _PLUGIN
            + '[plugins.configuration]\ngreeting = "hi"\n',
            "plugins[0].configuration",
            8,
        ),
        (
            "schema_version = 7\n" + _AUTHENTICATION + _MCP_7 + _PLUGIN + 'binding = "local"\n',
            "plugins[0].binding",
            8,
        ),
        (
            "schema_version = 3\n"
            + _AUTHENTICATION
            + '[authentication.operator_bearer]\nverifier_path = "/v.json"\n',
            "authentication.operator_bearer",
            4,
        ),
        (
            "schema_version = 4\n"
            + _AUTHENTICATION
            + '[authentication.oauth_jwt]\nissuer = "https://id.example.com"\n',
            "authentication.oauth_jwt",
            5,
        ),
        (
            "schema_version = 6\n"
            + _AUTHENTICATION
            + _MCP_6
            + "session_inactivity_timeout_seconds = 1\n",
            "mcp.session_inactivity_timeout_seconds",
            7,
        ),
        (
            "schema_version = 7\n" + _AUTHENTICATION + _MCP_7 + "max_sessions_per_principal = 2\n",
            "mcp.max_sessions_per_principal",
            8,
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and "\n" not in value else None,
)
def test_a_key_from_a_newer_schema_says_which_schema_version_it_needs(
    text: str, key: str, introduced: int
) -> None:
    """Not "unknown key": the key is right, the file's schema_version is too old."""
    error = _error(text)
    assert error.location.key == key
    assert error.detail is not None
    name = key.rsplit(".", 1)[-1]
    assert error.detail.startswith(f"{name!r} needs schema_version = {introduced} or later; ")
    written = key_position(text, key)
    assert (error.location.line, error.location.column) == written


def test_a_misspelled_key_in_a_table_is_still_unknown() -> None:
    error = _error("schema_version = 7\n[server]\nlog_levle = 1\n" + _AUTHENTICATION + _MCP_7)
    assert error.detail == "unknown key; [server] takes address, port"


_ELEMENT = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=12)


@given(
    elements=st.lists(_ELEMENT, min_size=1, max_size=6),
    gaps=st.lists(st.sampled_from(["", " ", "  ", "\t"]), min_size=14, max_size=14),
)
def test_each_element_of_an_array_on_one_line_is_found_at_its_column(
    elements: list[str], gaps: list[str]
) -> None:
    """`policy.rules[0].allow[2]` points at the third element itself, whatever it holds
    (commas, quotes, brackets, '#') and however the line is spaced."""
    line = "allow =" + gaps[0] + "[" + gaps[1]
    columns: list[int] = []
    for index, element in enumerate(elements):
        if index:
            line += gaps[2 + index] + "," + gaps[8 + index]
        columns.append(len(line) + 1)
        line += json.dumps(element)
    line += gaps[13] + "]  # a comment, with [brackets]"
    text = f'schema_version = 8\n[[policy.rules]]\nprincipals = ["local"]\n{line}\n'
    assert tomllib.loads(text)["policy"]["rules"][0]["allow"] == elements
    for index, column in enumerate(columns):
        assert key_position(text, f"policy.rules[0].allow[{index}]") == (4, column)
    assert key_position(text, f"policy.rules[0].allow[{len(elements)}]") == (4, 1)


def test_an_element_of_a_multi_line_array_is_found_at_its_key() -> None:
    text = 'schema_version = 8\n[[policy.rules]]\nprincipals = ["local"]\nallow = [\n  "a",\n]\n'
    assert key_position(text, "policy.rules[0].allow[0]") == (4, 1)


def test_a_fault_found_after_loading_is_located_in_the_file_again(tmp_path: Path) -> None:
    source = tmp_path / "config.toml"
    source.write_text(
        'schema_version = 8\n[[policy.rules]]\nprincipals = ["local"]\n'
        'allow = ["memory_recall", "nosuchtool"]\n'
    )
    error = ConfigurationError.at("policy_unknown_tool", "policy.rules[0].allow[1]", "none")
    locate_in_configuration(error, source)
    assert str(error).startswith(f"{source}:4:27: policy.rules[0].allow[1]: ")
    source.write_bytes(b"\xff")  # changed since: the key path alone must do
    again = ConfigurationError.at("policy_unknown_tool", "policy.rules[0].allow[1]", "none")
    locate_in_configuration(again, source)
    assert str(again).startswith(f"{source}: policy.rules[0].allow[1]: ")
    untouched = ConfigurationError.at("policy_unknown_tool", "policy", "none")
    locate_in_configuration(untouched, None)
    assert untouched.location == Location(key="policy")

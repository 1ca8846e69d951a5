"""Manifest v1: every parser error code, the schema subset, safe loading."""

from __future__ import annotations

import json
import math
import os
import string
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.errors import ManifestError
from mymcp.plugin import (
    AuthorityDeclaration,
    ConfigurationDeclaration,
    Consent,
    FilesystemClass,
    HostApiRange,
    ToolEffects,
    is_semver,
    load_manifest,
    manifest_from_mapping,
    parse_manifest,
)
from tests.plugin.helpers import encode, manifest

REPO = Path(__file__).resolve().parents[2]


def _code(data: bytes) -> str:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(data)
    assert caught.value.message.startswith("MyMCP plugin ")
    return caught.value.code


def _doc_code(document: object) -> str:
    return _code(encode(document))


def _capability(**changes: Any) -> dict[str, Any]:
    entry = dict(manifest()["capabilities"][0])
    entry.update(changes)
    return entry


# --- a valid manifest ------------------------------------------------------------------


def test_valid_manifest_parses_into_a_definition() -> None:
    definition = parse_manifest(encode(manifest(**{"$schema": "https://x.example/s.json"})))
    assert definition.manifest_version == 1
    assert definition.plugin_id == "sample-plugin"
    assert (definition.title, definition.version) == ("Sample", "1.2.3")
    assert definition.requires == HostApiRange(1, 1)
    assert [c.local_id for c in definition.capabilities] == ["first", "second", "third"]
    assert definition.capabilities[1].consent is Consent.PER_CALL
    assert definition.capabilities[2].effects == ToolEffects(False, True, True, False)
    assert definition.configuration.schema_version == 1
    assert definition.secret_references == ()
    assert definition.data_schema_version == 1
    assert definition.authority == AuthorityDeclaration((), False)


def test_bytes_and_mapping_give_equal_definitions() -> None:
    document = manifest(secret_references=["api_key"])
    assert parse_manifest(encode(document)) == manifest_from_mapping(document)


def test_packaged_mnemosyne_manifest_parses() -> None:
    path = REPO / "mymcp" / "plugins" / "mnemosyne" / "manifest.json"
    definition = parse_manifest(path.read_bytes())
    assert (definition.plugin_id, definition.version) == ("mnemosyne", "0.3.0")
    assert [c.local_id for c in definition.capabilities][:3] == [
        "memory_recall",
        "memory_list",
        "memory_inspect",
    ]
    assert definition.authority.filesystem == (
        FilesystemClass.DATA_READ,
        FilesystemClass.DATA_WRITE,
    )


def test_example_plugin_manifest_parses() -> None:
    definition = load_manifest(REPO / "examples" / "example_plugin" / "manifest.json")
    assert definition.plugin_id == "example-plugin"
    assert [c.local_id for c in definition.capabilities] == ["echo", "word_count"]
    assert all(c.effects.read_only for c in definition.capabilities)


# --- one test per parser error code ----------------------------------------------------


def test_manifest_resource_invalid() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest("not bytes")  # type: ignore[arg-type]
    assert caught.value.code == "manifest_resource_invalid"
    with pytest.raises(ManifestError) as caught:
        manifest_from_mapping(manifest(title={1, 2}))
    assert caught.value.code == "manifest_resource_invalid"


def test_manifest_resource_too_large() -> None:
    data = encode(manifest(description="x" * 4000))
    padded = data[:-1] + b" " * (65537 - len(data)) + b"}"
    assert len(padded) == 65537
    assert _code(padded) == "manifest_resource_too_large"
    assert parse_manifest(data[:-1] + b" " * (65536 - len(data)) + b"}").plugin_id


def test_manifest_resource_invalid_utf8() -> None:
    assert _code(encode(manifest())[:-1] + b"\xff}") == "manifest_resource_invalid_utf8"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"{'a': 1}",
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": -Infinity}',
        b'{"a": 1e400}',
        b"[" * 30000 + b"]" * 30000,
        b'\xef\xbb\xbf{"a": 1}',
        b'{"a": 1} {"b": 2}',
    ],
    ids=[
        "empty",
        "truncated",
        "single-quotes",
        "nan",
        "inf",
        "-inf",
        "overflow",
        "deep",
        "bom",
        "two",
    ],
)
def test_manifest_resource_invalid_json(data: bytes) -> None:
    assert _code(data) == "manifest_resource_invalid_json"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (b'{"id": "a", "id": "a"}', '"id"'),
        (b'{"requires": {"host_api": {"min": 1, "min": 1}}}', '"min"'),
        # An invisible character and the text of its escape are told apart.
        (b'{"title": 1, "\\u202e": 1, "\\u202e": 2}', '"\\u202e"'),
        (b'{"\\\\u202e": 1, "\\\\u202e": 2}', '"\\\\u202e"'),
        # Found before the rest nests too deeply to decode.
        (b'[{"a": 1, "a": 1},' + b"[" * 5000 + b"]" * 5000 + b"]", '"a"'),
    ],
)
def test_manifest_resource_duplicate_key_names_the_key(data: bytes, key: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(data)
    assert caught.value.code == "manifest_resource_duplicate_key"
    assert caught.value.detail == f"an object gives the key {key} more than once"


@pytest.mark.parametrize("root", [[], "manifest", 1, None, True])
def test_manifest_root_invalid(root: object) -> None:
    assert _doc_code(root) == "manifest_root_invalid"


@pytest.mark.parametrize(
    "document",
    [
        manifest(extra=1),
        manifest(requires={"host_api": {"min": 1, "max": 1}, "other": 1}),
        manifest(requires={"host_api": {"min": 1, "max": 1, "step": 1}}),
        manifest(capabilities=[_capability(name="x")]),
        manifest(configuration={"schema_version": 1, "schema": {}, "defaults": {}}),
    ],
    ids=["top", "requires", "host_api", "capability", "configuration"],
)
def test_manifest_unknown_field(document: dict[str, Any]) -> None:
    assert _doc_code(document) == "manifest_unknown_field"


@pytest.mark.parametrize(
    "field",
    [
        "manifest_version",
        "id",
        "title",
        "description",
        "version",
        "requires",
        "capabilities",
        "configuration",
        "secret_references",
        "data_schema_version",
        "authority",
    ],
)
def test_manifest_missing_field(field: str) -> None:
    document = manifest()
    del document[field]
    assert _doc_code(document) == "manifest_missing_field"


@pytest.mark.parametrize(
    "document",
    [
        manifest(requires={}),
        manifest(requires={"host_api": {"min": 1}}),
        manifest(capabilities=[{k: v for k, v in _capability().items() if k != "consent"}]),
        manifest(configuration={"schema_version": 1}),
    ],
    ids=["requires", "host_api", "capability", "configuration"],
)
def test_nested_missing_field(document: dict[str, Any]) -> None:
    assert _doc_code(document) == "manifest_missing_field"


INVALID_FIELDS: list[tuple[str, Any]] = [
    ("manifest_version", "1"),
    ("manifest_version", True),
    ("$schema", ""),
    ("$schema", "x" * 2049),
    ("$schema", "a\nb"),
    ("id", "Sample"),
    ("id", "sample_plugin"),
    ("id", "a" * 65),
    ("title", ""),
    ("title", "x" * 129),
    ("title", "tab\there"),
    ("title", "line\u2028sep"),
    ("title", 5),
    ("description", ""),
    ("description", "x" * 4097),
    ("description", "bell\x07"),
    ("version", "1.0"),
    ("version", "v1.0.0"),
    ("version", "01.0.0"),
    ("version", "1.0.0-" + "a" * 60),
    ("requires", []),
    ("requires", {"host_api": [1, 1]}),
    ("requires", {"host_api": {"min": 0, "max": 1}}),
    ("requires", {"host_api": {"min": 1, "max": 256}}),
    ("requires", {"host_api": {"min": 2, "max": 1}}),
    ("requires", {"host_api": {"min": True, "max": 1}}),
    ("requires", {"host_api": {"min": 1.0, "max": 1}}),
    ("capabilities", []),
    ("capabilities", {}),
    ("capabilities", ["tool"]),
    ("capabilities", [_capability(kind=1)]),
    ("capabilities", [_capability(id="First")]),
    ("capabilities", [_capability(id="a__b")]),
    ("capabilities", [_capability(id="a-b")]),
    ("capabilities", [_capability(version="1")]),
    ("capabilities", [_capability(read_only="true")]),
    ("capabilities", [_capability(destructive=0)]),
    ("capabilities", [_capability(idempotent=None)]),
    ("capabilities", [_capability(open_world=1)]),
    ("capabilities", [_capability(consent="always")]),
    ("capabilities", [_capability(read_only=True, destructive=True)]),
    ("capabilities", [_capability(id=f"t{i}") for i in range(65)]),
    ("configuration", "none"),
    ("configuration", {"schema_version": 2, "schema": manifest()["configuration"]["schema"]}),
    ("secret_references", "api_key"),
    ("secret_references", ["Api"]),
    ("secret_references", [1]),
    ("secret_references", [f"s{i}" for i in range(33)]),
    ("data_schema_version", 0),
    ("data_schema_version", 256),
    ("data_schema_version", "1"),
]


@pytest.mark.parametrize(("field", "value"), INVALID_FIELDS)
def test_manifest_invalid_field(field: str, value: Any) -> None:
    assert _doc_code(manifest(**{field: value})) == "manifest_invalid_field"


@pytest.mark.parametrize("value", [0, 2, 99])
def test_manifest_version_unsupported(value: int) -> None:
    assert _doc_code({"manifest_version": value, "anything": "else"}) == (
        "manifest_version_unsupported"
    )


@pytest.mark.parametrize("kind", ["resource", "prompt", "Tool", ""])
def test_manifest_capability_kind_unsupported(kind: str) -> None:
    document = manifest(capabilities=[_capability(kind=kind)])
    assert _doc_code(document) == "manifest_capability_kind_unsupported"


def test_manifest_duplicate_capability() -> None:
    document = manifest(capabilities=[_capability(), _capability(version="2.0.0")])
    assert _doc_code(document) == "manifest_duplicate_capability"


def test_manifest_duplicate_secret_reference() -> None:
    document = manifest(secret_references=["api_key", "token", "api_key"])
    assert _doc_code(document) == "manifest_duplicate_secret_reference"


def _object_schema(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False, **extra}


VALID_SCHEMAS = [
    _object_schema({}),
    _object_schema({"name": {"type": "string"}}, required=["name"]),
    _object_schema({t: {"type": t} for t in ["string", "integer", "number", "boolean", "null"]}),
    _object_schema({"list": {"type": "array", "items": {"type": "integer"}}}),
    _object_schema({"a": _object_schema({"b": _object_schema({"c": {"type": "string"}})})}),
    _object_schema({f"p{i}": {"type": "string"} for i in range(32)}),
]
INVALID_SCHEMAS = [
    {"type": "string"},
    {"type": "array", "items": {"type": "string"}},
    {"properties": {}, "additionalProperties": False},
    {"type": "object", "additionalProperties": False},
    {"type": "object", "properties": {}},
    _object_schema({}, additionalProperties=True),
    {"type": "object", "properties": {}, "additionalProperties": {}},
    _object_schema({}, description="x"),
    _object_schema({"a": {"type": "string"}}, required=["b"]),
    _object_schema({"a": {"type": "string"}}, required=["a", "a"]),
    _object_schema({"a": {"type": "string"}}, required="a"),
    _object_schema({"a": {"type": "string", "maxLength": 3}}),
    _object_schema({"a": {"type": "array"}}),
    _object_schema({"a": {"type": "array", "items": {"type": "date"}}}),
    _object_schema({"a": {"type": ["string", "null"]}}),
    _object_schema({"a": {"type": "integer", "default": 1}}),
    _object_schema({"a": "string"}),
    _object_schema({"": {"type": "string"}}),
    _object_schema({f"p{i}": {"type": "string"} for i in range(33)}),
    _object_schema(
        {
            "a": _object_schema({f"p{i}": {"type": "string"} for i in range(20)}),
            "b": _object_schema({f"q{i}": {"type": "string"} for i in range(20)}),
        }
    ),
    _object_schema(
        {"a": _object_schema({"b": _object_schema({"c": _object_schema({"d": {"type": "null"}})})})}
    ),
    _object_schema(
        {
            "a": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "array", "items": {"type": "null"}}},
            }
        }
    ),
]


@pytest.mark.parametrize("schema", VALID_SCHEMAS)
def test_configuration_schema_subset_accepts(schema: dict[str, Any]) -> None:
    definition = manifest_from_mapping(
        manifest(configuration={"schema_version": 1, "schema": schema})
    )
    assert json.loads(json.dumps(dict(definition.configuration.schema), default=_thaw)) == schema


def _thaw(value: Any) -> Any:
    return dict(value) if hasattr(value, "keys") else list(value)


@pytest.mark.parametrize("schema", INVALID_SCHEMAS)
def test_manifest_configuration_schema_invalid(schema: dict[str, Any]) -> None:
    document = manifest(configuration={"schema_version": 1, "schema": schema})
    assert _doc_code(document) == "manifest_configuration_schema_invalid"


@pytest.mark.parametrize(
    "authority",
    [
        [],
        {"filesystem": []},
        {"network": False},
        {"filesystem": [], "network": False, "process": True},
        {"filesystem": ["data_read", "data_read"], "network": False},
        {"filesystem": ["home_write"], "network": False},
        {"filesystem": "data_read", "network": False},
        {"filesystem": [], "network": "no"},
        {"filesystem": [1], "network": False},
    ],
)
def test_manifest_authority_invalid(authority: Any) -> None:
    assert _doc_code(manifest(authority=authority)) == "manifest_authority_invalid"


def test_all_filesystem_classes_are_accepted_in_order() -> None:
    classes = ["cache_write", "data_read", "data_write", "state_read", "state_write", "cache_read"]
    definition = manifest_from_mapping(manifest(authority={"filesystem": classes, "network": True}))
    assert [c.value for c in definition.authority.filesystem] == classes
    assert definition.authority.network is True


def test_messages_never_carry_values() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(encode(manifest(id="Secret-Value-XYZ")))
    assert "Secret-Value-XYZ" not in caught.value.message
    assert len(ManifestError.messages()) == 28
    assert all(m.startswith("MyMCP plugin ") for m in ManifestError.messages().values())


def test_definition_is_frozen_against_the_source_mapping() -> None:
    document = manifest(
        configuration={
            "schema_version": 1,
            "schema": _object_schema({"a": {"type": "string"}}),
        }
    )
    definition = manifest_from_mapping(document)
    document["configuration"]["schema"]["properties"]["b"] = {"type": "null"}
    assert "b" not in definition.configuration.schema["properties"]
    with pytest.raises(TypeError):
        definition.configuration.schema["properties"]["c"] = 1  # type: ignore[index]


@pytest.mark.parametrize("value", [(1, 2), [1.5], None])
def test_mapping_input_accepts_plain_json_values(value: Any) -> None:
    # tuples act as arrays and finite floats/None are JSON; they still fail the field rule.
    with pytest.raises(ManifestError) as caught:
        manifest_from_mapping(manifest(title=value))
    assert caught.value.code == "manifest_invalid_field"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), object(), b"bytes", {1: "int key"}])
def test_mapping_input_rejects_non_json_values(bad: Any) -> None:
    with pytest.raises(ManifestError) as caught:
        manifest_from_mapping(manifest(extra=bad))
    assert caught.value.code == "manifest_resource_invalid"


def test_mapping_input_must_be_a_mapping() -> None:
    with pytest.raises(ManifestError) as caught:
        manifest_from_mapping([("id", "x")])  # type: ignore[arg-type]
    assert caught.value.code == "manifest_root_invalid"


# --- load_manifest: the safe reader ----------------------------------------------------


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "plugin"
    directory.mkdir(mode=0o755)
    return directory


def _write(path: Path, data: bytes, mode: int = 0o644) -> Path:
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def _load_code(path: Path) -> str:
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    return caught.value.code


def test_load_manifest_reads_a_safe_file(plugin_dir: Path) -> None:
    path = _write(plugin_dir / "manifest.json", encode(manifest()))
    assert load_manifest(path).plugin_id == "sample-plugin"


def test_load_manifest_rejects_a_symlinked_file(plugin_dir: Path, tmp_path: Path) -> None:
    real = _write(tmp_path / "real.json", encode(manifest()))
    (plugin_dir / "manifest.json").symlink_to(real)
    assert _load_code(plugin_dir / "manifest.json") == "manifest_resource_unsafe_path"


def test_load_manifest_rejects_a_symlinked_directory(plugin_dir: Path, tmp_path: Path) -> None:
    _write(plugin_dir / "manifest.json", encode(manifest()))
    link = tmp_path / "link"
    link.symlink_to(plugin_dir, target_is_directory=True)
    assert _load_code(link / "manifest.json") == "manifest_resource_unsafe_path"


@pytest.mark.parametrize(
    ("file_mode", "dir_mode"), [(0o664, 0o755), (0o646, 0o755), (0o644, 0o775)]
)
def test_load_manifest_rejects_writable_sources(
    plugin_dir: Path, file_mode: int, dir_mode: int
) -> None:
    path = _write(plugin_dir / "manifest.json", encode(manifest()), file_mode)
    os.chmod(plugin_dir, dir_mode)
    assert _load_code(path) == "manifest_resource_unsafe_permissions"


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can chown a file to another user (nobody)")
@pytest.mark.parametrize("owned", ["file", "directory"])
def test_load_manifest_rejects_sources_owned_by_another_user(plugin_dir: Path, owned: str) -> None:
    path = _write(plugin_dir / "manifest.json", encode(manifest()))  # 0644 in 0755
    at_fault = path if owned == "file" else plugin_dir
    os.chown(at_fault, NOBODY, NOBODY)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.code == "manifest_resource_unsafe_permissions"
    assert caught.value.location.source == str(at_fault)
    assert f"is owned by another user (uid {NOBODY})" in str(caught.value.detail)
    assert str(caught.value.detail).endswith("keep it where the user MyMCP runs as owns it")


def test_load_manifest_rejects_oversize(plugin_dir: Path) -> None:
    path = _write(plugin_dir / "manifest.json", b" " * 65537)
    assert _load_code(path) == "manifest_resource_too_large"


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        ("directory", "manifest_resource_not_regular"),
        ("fifo", "manifest_resource_not_regular"),
        ("missing", "manifest_resource_unreadable"),
    ],
)
def test_load_manifest_rejects_non_regular_or_missing(
    plugin_dir: Path, kind: str, code: str
) -> None:
    """The safe-file reason becomes the code exactly as the server's preflight names it
    (`external_manifest_<reason>`), through the one mapping."""
    path = plugin_dir / "manifest.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    assert _load_code(path) == code


# --- SemVer ----------------------------------------------------------------------------


def _semver_oracle(value: str) -> bool:
    """SemVer 2.0.0 written out structurally."""
    if len(value) > 64:
        return False
    core, plus, build = value.partition("+")
    if plus and not all(
        part and set(part) <= set(string.ascii_letters + string.digits + "-")
        for part in build.split(".")
    ):
        return False
    core, dash, pre = core.partition("-")
    numbers = core.split(".")
    if len(numbers) != 3 or not all(_numeric(n) for n in numbers):
        return False
    if dash:
        for part in pre.split("."):
            if not part or not set(part) <= set(string.ascii_letters + string.digits + "-"):
                return False
            if part.isdigit() and not _numeric(part):
                return False
    return True


def _numeric(text: str) -> bool:
    return text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0"))


@pytest.mark.parametrize(
    "value",
    [
        "0.0.0",
        "1.2.3",
        "10.20.30",
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-0.3.7",
        "1.0.0-x.7.z.92",
        "1.0.0+20130313144700",
        "1.0.0-beta+exp.sha.5114f85",
        "1.0.0--1",
    ],
)
def test_valid_semver(value: str) -> None:
    assert is_semver(value)


@pytest.mark.parametrize(
    "value",
    [
        "1",
        "1.0",
        "1.0.0.0",
        "v1.0.0",
        "01.0.0",
        "1.01.0",
        "1.0.0-",
        "1.0.0+",
        "1.0.0-01",
        "1.0.0-a..b",
        "1.0.0+a..b",
        "\uff11.0.0",
        " 1.0.0",
        "1.0.0\n",
        "",
        "1.0.0-" + "a" * 59,
    ],
)
def test_invalid_semver(value: str) -> None:
    assert not is_semver(value)


SEMVER_CHARS = st.sampled_from("0123456789.-+aZ")


@given(st.text(SEMVER_CHARS, max_size=20))
def test_semver_matches_its_structural_definition(value: str) -> None:
    assert is_semver(value) == _semver_oracle(value)


@given(
    st.tuples(*[st.integers(0, 10**6)] * 3),
    st.lists(st.from_regex(r"[0-9A-Za-z-]{1,5}", fullmatch=True), max_size=3),
)
def test_generated_versions_are_semver(core: tuple[int, int, int], pre: list[str]) -> None:
    value = ".".join(map(str, core)) + ("-" + ".".join(pre) if pre else "")
    assert is_semver(value) == _semver_oracle(value)


def test_errors_name_the_key_path_and_what_was_expected() -> None:
    capability = _capability()
    del capability["consent"]
    with pytest.raises(ManifestError) as caught:
        parse_manifest(encode(manifest(capabilities=[_capability(), capability])))
    assert caught.value.location.key == "capabilities[1].consent"
    assert caught.value.code == "manifest_missing_field"
    wrong = {**_capability(), "consent": "always"}
    with pytest.raises(ManifestError) as caught:
        parse_manifest(encode(manifest(capabilities=[wrong])), Path("/p/manifest.json"))
    assert str(caught.value) == (
        "/p/manifest.json: capabilities[0].consent: MyMCP plugin manifest has an invalid "
        'field: expected "none" or "per_call", got "always" (a string) '
        "(code=manifest_invalid_field)"
    )
    with pytest.raises(ManifestError) as caught:
        parse_manifest(encode(manifest(unexpected_key_xyz=1)))
    assert caught.value.code == "manifest_unknown_field"
    assert caught.value.location.key == "unexpected_key_xyz"
    assert "unexpected_key_xyz" not in caught.value.message


def test_a_read_only_tool_that_is_also_destructive_is_refused() -> None:
    # Such a tool would match a policy's `@read_only` and its `@destructive` alike, so a
    # rule letting anonymous callers use read-only tools would let them destroy.
    capabilities = [_capability(), _capability(id="wipe", read_only=True, destructive=True)]
    document = manifest(capabilities=capabilities)
    with pytest.raises(ManifestError) as caught:
        parse_manifest(encode(document), Path("/p/manifest.json"))
    assert caught.value.code == "manifest_invalid_field"
    assert caught.value.location.key == "capabilities[1].destructive"
    assert str(caught.value) == (
        "/p/manifest.json: capabilities[1].destructive: MyMCP plugin manifest has an invalid "
        "field: a read-only tool cannot be destructive: set destructive to false, or "
        "read_only to false if the tool changes anything (code=manifest_invalid_field)"
    )
    with pytest.raises(ManifestError) as caught:
        manifest_from_mapping(document)
    assert caught.value.location.key == "capabilities[1].destructive"


@pytest.mark.parametrize(
    ("read_only", "destructive"), [(True, False), (False, True), (False, False)]
)
@pytest.mark.parametrize(("idempotent", "open_world"), [(True, False), (False, True)])
def test_every_other_combination_of_effects_is_accepted(
    read_only: bool, destructive: bool, idempotent: bool, open_world: bool
) -> None:
    flags = {
        "read_only": read_only,
        "destructive": destructive,
        "idempotent": idempotent,
        "open_world": open_world,
    }
    definition = parse_manifest(encode(manifest(capabilities=[_capability(**flags)])))
    assert definition.capabilities[0].effects == ToolEffects(**flags)


def test_a_json_syntax_error_names_line_and_column() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(b'{\n  "id": "x"\n  "title": "y"\n}', Path("/p/manifest.json"))
    assert caught.value.code == "manifest_resource_invalid_json"
    assert str(caught.value) == (
        "/p/manifest.json:3:3: MyMCP plugin manifest is not valid JSON: "
        "Expecting ',' delimiter (code=manifest_resource_invalid_json)"
    )


# --- the operator's values against the declared configuration schema -------------------


_GREETER_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "greeting": {"type": "string"},
        "limits": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"max_items": {"type": "integer"}},
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "ratio": {"type": "number"},
    },
}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"greeting": 42}, ("greeting", "expected a string, got 42 (an integer)")),
        ({"greeting": True}, ("greeting", "expected a string, got true (a boolean)")),
        ({"limits": "3"}, ("limits", 'expected a table, got "3" (a string)')),
        (
            {"limits": {"max_items": 1.5}},
            ("limits.max_items", "expected an integer, got 1.5 (a float)"),
        ),
        ({"tags": {"a": 1}}, ("tags", 'expected an array, got {"a": 1} (a table)')),
        ({"tags": ["a", None]}, ("tags[1]", "expected a string, got null (null)")),
        # TOML writes `nan` and `inf`; a JSON Schema number is neither.
        ({"ratio": math.nan}, ("ratio", "expected a finite number, got nan")),
        ({"ratio": -math.inf}, ("ratio", "expected a finite number, got -inf")),
    ],
)
def test_a_configuration_value_of_the_wrong_type_is_worded_like_every_other_fault(
    values: dict[str, Any], expected: tuple[str, str]
) -> None:
    """`got 42 (an integer)`, as the host configuration says `got "8000" (a string)`; the
    values arrive frozen, as the host hands them over, and are still named by their
    TOML kinds."""
    declaration = ConfigurationDeclaration(1, _GREETER_SCHEMA)
    frozen = MappingProxyType(
        {key: tuple(value) if isinstance(value, list) else value for key, value in values.items()}
    )
    assert declaration.violation(frozen) == expected


_SECRETIVE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "api_key": {"type": "string"},
        "vault": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"tokens": {"type": "array", "items": {"type": "string"}}},
        },
        "owner": {"type": "string"},
        "endpoint": {"type": "string"},
    },
}


@pytest.mark.parametrize(
    ("values", "secrets", "expected"),
    [
        ({"api_key": ("sk-hidden",)}, (), ("api_key", "expected a string, got an array")),
        ({"vault": {"tokens": [7]}}, (), ("vault.tokens[0]", "expected a string, got an integer")),
        ({"endpoint": 5}, ("endpoint",), ("endpoint", "expected a string, got an integer")),
    ],
)
def test_a_wrong_value_under_a_secret_key_is_not_shown(
    values: dict[str, Any], secrets: tuple[str, ...], expected: tuple[str, str]
) -> None:
    # Named like a secret, or named in the manifest's secret_references: the diagnostic
    # goes to terminals and CI logs, where a key or token would stay.
    declaration = ConfigurationDeclaration(1, _SECRETIVE_SCHEMA)
    where, detail = declaration.violation(values, secrets) or ("", "")
    assert (where, detail) == (expected[0], f"{expected[1]} (not shown: the key names a secret)")
    assert "hidden" not in detail
    assert "7" not in detail


@pytest.mark.parametrize(
    ("values", "secrets"),
    [
        ({"owner": {"api_token": "sk-hidden"}}, ()),
        ({"endpoint": [{"dsn": "postgres://u:hidden@h/db"}]}, ("dsn",)),
    ],
)
def test_a_wrong_value_holding_a_secret_is_not_shown(
    values: dict[str, Any], secrets: tuple[str, ...]
) -> None:
    declaration = ConfigurationDeclaration(1, _SECRETIVE_SCHEMA)
    problem = declaration.violation(values, secrets)
    assert problem is not None
    assert problem[1].endswith("(not shown: it holds a secret)")
    assert "hidden" not in problem[1]


def test_other_wrong_values_are_shown_as_read() -> None:
    declaration = ConfigurationDeclaration(1, _SECRETIVE_SCHEMA)
    # A frozen array reads as the TOML array it was, not as a Python tuple.
    assert declaration.violation({"owner": ("ada",)}) == (
        "owner",
        'expected a string, got ["ada"] (an array)',
    )

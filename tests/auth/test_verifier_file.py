from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from mymcp.auth._verifier_file import (
    VerifierSourceError,
    load_verifier,
    parse_verifier,
    serialize_verifier,
)
from tests.auth.helpers import b64

ID = "0123456789abcdef0123456789abcdef"
DIGEST = b64(hashlib.sha256(b"x" * 32).digest())


def document(*records: dict[str, object], **top: object) -> bytes:
    body: dict[str, object] = {"format_version": 1, "credentials": list(records)}
    body.update(top)
    return json.dumps(body).encode()


def record(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {"id": ID, "subject": "alice", "digest": DIGEST}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def write(directory: Path, data: bytes, mode: int = 0o600) -> Path:
    directory.chmod(0o700)
    path = directory / "verifier.json"
    path.write_bytes(data)
    path.chmod(mode)
    return path


def code_of(call: object) -> str:
    with pytest.raises(VerifierSourceError) as info:
        call()  # type: ignore[operator]
    return info.value.code


def test_valid_file_round_trips(tmp_path: Path) -> None:
    credentials = load_verifier(write(tmp_path, document(record(), record(id="a" * 32))))
    assert [(c.id, c.subject) for c in credentials] == [(ID, "alice"), ("a" * 32, "alice")]
    assert parse_verifier(serialize_verifier(credentials)) == credentials


def test_empty_credential_list_is_valid() -> None:
    assert parse_verifier(document()) == ()


@pytest.mark.parametrize(
    "data",
    [
        document(extra=1),
        json.dumps({"format_version": 1}).encode(),
        document(format_version=2),
        document(format_version=True),
        document(format_version=1.0),
        document(credentials={}),
        document(*[record(id=f"{i:032x}") for i in range(33)]),
        document(record(), record()),  # duplicate id
        document(record(extra="x")),
        document(record(id=None)),
        document(record(id=ID.upper())),
        document(record(subject=" ")),
        document(record(subject="e\u0301")),
        document(record(digest=DIGEST + "A")),
        document(record(digest=DIGEST[:-1] + "B")),  # non-canonical trailing bits
        document(record(digest=b64(b"x" * 31) + "AA")),
        b'{"format_version": 1, "format_version": 1, "credentials": []}',
        b'{"format_version": 1, "credentials": [], "credentials": []}',
        b"[]",
        b"not json",
    ],
)
def test_invalid_format(data: bytes) -> None:
    assert code_of(lambda: parse_verifier(data)) == "invalid_format"


def test_a_byte_order_mark_is_named() -> None:
    # Some editors save one; the operator must learn that it is what is wrong.
    with pytest.raises(VerifierSourceError) as caught:
        parse_verifier(b"\xef\xbb\xbf" + document())
    assert caught.value.detail is not None
    assert "byte-order mark (U+FEFF)" in caught.value.detail


def test_invalid_utf8() -> None:
    assert code_of(lambda: parse_verifier(b'{"x": "\xff"}')) == "invalid_utf8"


def test_thirty_two_credentials_is_the_limit() -> None:
    assert len(parse_verifier(document(*[record(id=f"{i:032x}") for i in range(32)]))) == 32


def test_oversize_file_is_too_large(tmp_path: Path) -> None:
    data = document(record()) + b" " * (16 * 1024)
    assert code_of(lambda: load_verifier(write(tmp_path, data))) == "too_large"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o610])
def test_group_or_world_bits_are_unsafe(tmp_path: Path, mode: int) -> None:
    path = write(tmp_path, document(record()), mode)
    assert code_of(lambda: load_verifier(path)) == "unsafe_permissions"


def test_symlinked_file_is_unsafe(tmp_path: Path) -> None:
    target = write(tmp_path, document(record()))
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert code_of(lambda: load_verifier(link)) == "unsafe_path"


def test_symlinked_parent_is_unsafe(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    write(real, document(record()))
    (tmp_path / "alias").symlink_to(real)
    assert code_of(lambda: load_verifier(tmp_path / "alias" / "verifier.json")) == "unsafe_path"


def test_group_writable_parent_is_unsafe(tmp_path: Path) -> None:
    path = write(tmp_path, document(record()))
    tmp_path.chmod(0o770)
    assert code_of(lambda: load_verifier(path)) == "unsafe_permissions"


def test_directory_instead_of_file_is_unsafe(tmp_path: Path) -> None:
    (tmp_path / "verifier.json").mkdir(mode=0o700)
    tmp_path.chmod(0o700)
    assert code_of(lambda: load_verifier(tmp_path / "verifier.json")) == "not_regular"


def test_missing_file_is_unreadable_unless_allowed(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    assert code_of(lambda: load_verifier(tmp_path / "absent.json")) == "unreadable"
    assert load_verifier(tmp_path / "absent.json", allow_missing=True) == ()


@pytest.mark.parametrize(
    "path",
    [
        "relative/verifier.json",
        "/etc/~/v.json",
        "/etc/$HOME/v.json",
        "/etc/%x/v.json",
        "/etc/../v.json",
        "/etc/a\\..\\v.json",
    ],
)
def test_unsafe_path_grammar(path: str) -> None:
    assert code_of(lambda: load_verifier(Path(path))) == "unsafe_path"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of mode")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path, document(record()), 0o000)
    assert code_of(lambda: load_verifier(path)) == "unreadable"

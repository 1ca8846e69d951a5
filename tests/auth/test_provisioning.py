from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from mymcp.auth import (
    Authenticator,
    AuthFailure,
    CredentialProvisioningError,
    build_authenticator,
    create_token,
    list_credentials,
    revoke_token,
)
from mymcp.auth._operator_bearer import parse_token
from mymcp.config import AdapterDeclaration, AuthenticationSettings
from tests.auth.helpers import SERVER, bearer_route, run


@pytest.fixture
def verifier(tmp_path: Path) -> Path:
    directory = tmp_path / "mymcp"
    directory.mkdir(mode=0o700)
    return directory / "operator-bearer.json"


def authenticator(path: Path) -> Authenticator:
    adapter = AdapterDeclaration("local-client", "operator-bearer-v1", True, bearer_route())
    settings = AuthenticationSettings(
        anonymous_enabled=False, adapters=(adapter,), operator_bearer_verifier_path=path
    )
    return build_authenticator(settings, SERVER)


def code_of(call: object) -> str:
    with pytest.raises(CredentialProvisioningError) as info:
        call()  # type: ignore[operator]
    return info.value.code


def test_round_trip_create_verify_list_revoke(verifier: Path) -> None:
    token, credential_id = create_token(verifier, "alice")
    parsed = parse_token(token)
    assert parsed is not None
    assert parsed.credential_id == credential_id
    assert stat.S_IMODE(verifier.stat().st_mode) == 0o600
    assert token not in verifier.read_text()  # only the digest is stored

    principal = run(authenticator(verifier).authenticate([f"Bearer {token}"]))
    assert principal.principal_id == "registered:local-client:YWxpY2U"  # type: ignore[union-attr]
    assert list_credentials(verifier) == [(credential_id, "alice")]

    assert revoke_token(verifier, credential_id) is True
    assert list_credentials(verifier) == []
    assert run(authenticator(verifier).authenticate([f"bearer {token}"])) is AuthFailure.REJECTED
    assert revoke_token(verifier, credential_id) is False


def test_rotation_keeps_existing_credentials(verifier: Path) -> None:
    old, old_id = create_token(verifier, "alice")
    new, new_id = create_token(verifier, "alice")
    create_token(verifier, "bob")
    assert [row[1] for row in list_credentials(verifier)] == ["alice", "alice", "bob"]
    auth = authenticator(verifier)
    assert run(auth.authenticate([f"Bearer {old}"])) == run(auth.authenticate([f"Bearer {new}"]))
    revoke_token(verifier, old_id)
    auth = authenticator(verifier)  # changes are picked up on restart
    assert run(auth.authenticate([f"Bearer {old}"])) is AuthFailure.REJECTED
    assert run(auth.authenticate([f"Bearer {new}"])).subject == "alice"  # type: ignore[union-attr]
    assert list_credentials(verifier)[0][0] == new_id


def test_running_authenticator_keeps_its_snapshot(verifier: Path) -> None:
    token, credential_id = create_token(verifier, "alice")
    auth = authenticator(verifier)
    revoke_token(verifier, credential_id)
    assert run(auth.authenticate([f"Bearer {token}"])).subject == "alice"  # type: ignore[union-attr]


def test_limit_of_thirty_two(verifier: Path) -> None:
    for index in range(32):
        create_token(verifier, f"user-{index}")
    before = verifier.read_bytes()
    assert code_of(lambda: create_token(verifier, "one-more")) == "credential_limit_exceeded"
    assert verifier.read_bytes() == before


def test_file_size_bound(verifier: Path) -> None:
    wide = "\U00010348" * 254  # 1016 UTF-8 bytes per subject
    created = 0
    code = None
    while created < 32 and code is None:
        try:
            create_token(verifier, f"{created:02d}{wide}")
            created += 1
        except CredentialProvisioningError as error:
            code = error.code
    assert code == "verifier_too_large"
    assert 10 < created < 16
    assert len(list_credentials(verifier)) == created
    assert len(verifier.read_bytes()) <= 16 * 1024


@pytest.mark.parametrize("subject", ["", "  ", "a\x00", "x" * 257, "e\u0301"])
def test_invalid_subject(verifier: Path, subject: str) -> None:
    assert code_of(lambda: create_token(verifier, subject)) == "invalid_subject"
    assert not verifier.exists()
    with pytest.raises(CredentialProvisioningError) as refused:
        create_token(verifier, subject)
    assert "a subject is 1 to 256 characters of visible text" in str(refused.value)
    assert repr(subject[:80]) in str(refused.value)  # shown escaped, never raw


def test_missing_parent(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "v.json"
    assert code_of(lambda: create_token(path, "alice")) == "unsafe_directory"


def test_symlinked_parent(tmp_path: Path, verifier: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(verifier.parent)
    assert code_of(lambda: create_token(alias / "v.json", "alice")) == "unsafe_directory"


def test_group_writable_parent(verifier: Path) -> None:
    verifier.parent.chmod(0o775)
    assert code_of(lambda: create_token(verifier, "alice")) == "unsafe_directory"


def test_unsafe_existing_file_is_never_overwritten(verifier: Path) -> None:
    create_token(verifier, "alice")
    verifier.chmod(0o644)
    before = verifier.read_bytes()
    with pytest.raises(CredentialProvisioningError) as info:
        create_token(verifier, "bob")
    assert (info.value.code, info.value.reason) == ("verifier_source", "unsafe_permissions")
    assert info.value.location.source == str(verifier)
    assert code_of(lambda: revoke_token(verifier, "0" * 32)) == "verifier_source"
    assert code_of(lambda: list_credentials(verifier)) == "verifier_source"
    assert verifier.read_bytes() == before


def test_invalid_existing_file_is_never_overwritten(verifier: Path) -> None:
    verifier.write_text(json.dumps({"format_version": 2, "credentials": []}))
    verifier.chmod(0o600)
    with pytest.raises(CredentialProvisioningError) as info:
        create_token(verifier, "bob")
    assert info.value.reason == "invalid_format"


def test_symlinked_verifier_is_refused(tmp_path: Path, verifier: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    verifier.symlink_to(target)
    assert code_of(lambda: create_token(verifier, "alice")) == "verifier_source"
    assert target.read_text() == "{}"


def test_no_temporary_files_are_left_behind(verifier: Path) -> None:
    _, credential_id = create_token(verifier, "alice")
    revoke_token(verifier, credential_id)
    assert [p.name for p in verifier.parent.iterdir()] == [verifier.name]


def test_list_and_revoke_on_absent_file(verifier: Path) -> None:
    assert list_credentials(verifier) == []
    assert revoke_token(verifier, "0" * 32) is False
    assert revoke_token(verifier, "not-an-id") is False
    assert not verifier.exists()


def test_a_relative_verifier_file_is_created_where_it_is_said_to_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The configuration takes only absolute paths: the command names the file it wrote,
    # so the operator can put exactly that in `verifier_path`.
    from mymcp.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    argv = ["auth", "token", "create", "--subject", "bob", "--verifier-file", "rel.json"]
    assert main(argv) == 0
    token = capsys.readouterr()
    written = tmp_path / "rel.json"
    assert written.is_file()
    assert f"verifier file: {written} " in token.err
    assert token.out.startswith("mymcp1.")


@pytest.mark.parametrize(
    ("subject", "warned"),
    [
        ("alice", []),
        (" alice", ["begins or ends with a space"]),
        ("team*", ["holds *, which a policy selector reads as a wildcard"]),
        ("*", ["holds *, which a policy selector reads as a wildcard"]),
    ],
)
def test_a_subject_a_policy_rule_is_easily_written_wrong_for_is_warned_of(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    subject: str,
    warned: list[str],
) -> None:
    # Valid subjects, created as asked; but `operator:*` matches every operator, and a
    # rule for ` alice` must carry the space.
    from mymcp.cli import main

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    verifier = tmp_path / "verifier.json"
    argv = ["auth", "token", "create", "--subject", subject, "--verifier-file", str(verifier)]
    assert main(argv) == 0
    said = capsys.readouterr()
    warnings = [line for line in said.err.splitlines() if line.startswith("mymcp: warning:")]
    assert len(warnings) == len(warned)
    for line, text in zip(warnings, warned, strict=True):
        assert text in line
    assert [subject] == [s for _, s in list_credentials(verifier)]


def test_revoking_an_unknown_id_names_the_file_and_the_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mymcp.cli import main

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    verifier = tmp_path / "verifier.json"
    create_token(verifier, "alice")
    argv = ["auth", "token", "revoke", "0" * 32, "--verifier-file", str(verifier)]
    assert main(argv) == 1
    assert capsys.readouterr().err == (
        f"mymcp: error: {verifier}: no credential has the id '{'0' * 32}'; "
        "`mymcp auth token list` shows them\n"
    )

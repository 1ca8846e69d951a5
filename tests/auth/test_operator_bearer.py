from __future__ import annotations

import hashlib
import hmac
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.auth import AuthFailure
from mymcp.auth._operator_bearer import OperatorBearerAdapter, format_token, parse_token
from mymcp.auth._principal import Identity
from mymcp.auth._verifier_file import Credential
from tests.auth.helpers import b64, run

ID = "0123456789abcdef0123456789abcdef"
SECRET = bytes(range(32))
TOKEN = f"mymcp1.{ID}.{b64(SECRET)}"


def adapter() -> OperatorBearerAdapter:
    return OperatorBearerAdapter([Credential(ID, "alice", hashlib.sha256(SECRET).digest())])


def test_valid_token_returns_subject() -> None:
    assert run(adapter().authenticate(TOKEN)) == Identity("alice", "operator:alice")
    assert format_token(ID, SECRET) == TOKEN


def test_wrong_secret_and_unknown_id_are_rejected() -> None:
    other = f"mymcp1.{ID}.{b64(bytes(32))}"
    unknown = f"mymcp1.{'f' * 32}.{b64(SECRET)}"
    assert adapter().verify(other) is AuthFailure.REJECTED
    assert adapter().verify(unknown) is AuthFailure.REJECTED


@pytest.mark.parametrize(
    "token",
    [
        TOKEN.upper(),
        TOKEN.replace("mymcp1", "mymcp2"),
        TOKEN + "=",
        TOKEN + ".x",
        " " + TOKEN,
        TOKEN + "\n",
        f"mymcp1.{ID[:-1]}.{b64(SECRET)}",
        f"mymcp1.{ID.upper()}.{b64(SECRET)}",
        f"mymcp1.{ID}.{b64(SECRET)[:-1]}",
        f"mymcp1.{ID}.{b64(SECRET + b'x')}",
        f"mymcp1.{ID}.+{b64(SECRET)[1:]}",
        f"mymcp1.{ID}./{b64(SECRET)[1:]}",
        f"mymcp1.{ID}.{b64(bytes([0xFF] * 32))[:-1]}9",  # non-zero trailing bits
        f"mymcp1.{ID}.{b64(SECRET)[:-1]}é",
        f"mymcp1.{ID}",
        "",
    ],
)
def test_grammar_failures_are_malformed(token: str) -> None:
    assert adapter().verify(token) is AuthFailure.MALFORMED


_SECRET_CHARS = string.ascii_letters + string.digits + "-_"


@given(st.binary(min_size=32, max_size=32), st.text("0123456789abcdef", min_size=32, max_size=32))
def test_every_generated_token_parses_back(secret: bytes, credential_id: str) -> None:
    parsed = parse_token(format_token(credential_id, secret))
    assert parsed is not None
    assert (parsed.credential_id, parsed.secret) == (credential_id, secret)


@given(st.text(max_size=120))
def test_arbitrary_text_parses_only_in_canonical_form(text: str) -> None:
    parsed = parse_token(text)
    if parsed is not None:
        assert format_token(parsed.credential_id, parsed.secret) == text


@given(st.text(_SECRET_CHARS, min_size=43, max_size=43))
def test_secret_alphabet_only_canonical_spellings(secret_text: str) -> None:
    parsed = parse_token(f"mymcp1.{ID}.{secret_text}")
    # 43 chars carry 258 bits: only spellings whose last two bits are zero are canonical.
    canonical = secret_text[-1] in "AEIMQUYcgkosw048"
    assert (parsed is not None) == canonical


def test_unknown_id_does_the_same_hashing_work(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", spy)
    unknown = f"mymcp1.{'e' * 32}.{b64(SECRET)}"
    assert adapter().verify(unknown) is AuthFailure.REJECTED
    assert adapter().verify(TOKEN) == "alice"
    assert len(calls) == 2
    assert all(len(a) == 32 and len(b) == 32 for a, b in calls)

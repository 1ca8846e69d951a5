from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given
from hypothesis import strategies as st

from mymcp.auth import AuthFailure, Principal, build_authenticator
from mymcp.auth._jwks import VerificationKey, parse_jwks
from mymcp.errors import DiscoveryError, HostAuthenticationCompositionError
from tests.auth.helpers import (
    SERVER,
    FakeClock,
    FakeIssuer,
    b64,
    mint,
    oauth_settings,
    public_jwk,
    run,
)

LOGGER = "mymcp.host.authentication"

Entry = dict[str, object]


def parse(*entries: object) -> dict[str, VerificationKey]:
    return dict(parse_jwks(json.dumps({"keys": list(entries)}).encode()))


def refusal(*entries: object) -> str:
    """The detail of the `jwks_invalid` the set gets (every refusal has one)."""
    with pytest.raises(DiscoveryError) as info:
        parse(*entries)
    assert info.value.code == "jwks_invalid"
    assert info.value.detail
    return info.value.detail


def refusal_of(body: bytes) -> str:
    with pytest.raises(DiscoveryError) as info:
        parse_jwks(body)
    assert info.value.code == "jwks_invalid"
    assert info.value.detail
    return info.value.detail


@pytest.fixture(scope="module")
def small_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505


def test_all_three_key_families(
    rsa_key: rsa.RSAPrivateKey,
    ec_key: ec.EllipticCurvePrivateKey,
    ed_key: ed25519.Ed25519PrivateKey,
) -> None:
    keys = parse(
        public_jwk(rsa_key, "r", use="sig"),
        public_jwk(ec_key, "e", alg="ES256"),
        public_jwk(ed_key, "o", key_ops=["verify"]),
    )
    assert keys["r"].algorithms == {"RS256", "PS256"}
    assert keys["e"].algorithms == {"ES256"}
    assert keys["o"].algorithms == {"EdDSA"}
    assert isinstance(keys["r"].key, rsa.RSAPublicKey)
    assert isinstance(keys["o"].key, ed25519.Ed25519PublicKey)


def test_rsa_alg_pins_the_algorithm(rsa_key: rsa.RSAPrivateKey) -> None:
    assert parse(public_jwk(rsa_key, "r", alg="PS256"))["r"].algorithms == {"PS256"}


def test_keys_for_other_uses_and_types_are_skipped(
    rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    p384 = ec.generate_private_key(ec.SECP384R1())
    keys = parse(
        public_jwk(rsa_key, "enc", use="enc"),
        public_jwk(rsa_key, "oaep", alg="RSA-OAEP"),
        public_jwk(rsa_key, "hs", alg="HS256"),
        public_jwk(rsa_key, "ops", key_ops=["encrypt"]),
        public_jwk(p384, "p384"),
        {"kty": "oct", "kid": "sym"},
        {"kty": "OKP", "crv": "X25519", "x": b64(bytes(32)), "kid": "x"},
        {"kty": ["RSA"], "kid": "weird"},
        public_jwk(ec_key, "ok"),
    )
    assert list(keys) == ["ok"]


@dataclass(frozen=True)
class Keys:
    rsa: rsa.RSAPrivateKey
    small: rsa.RSAPrivateKey
    ec: ec.EllipticCurvePrivateKey
    ed: ed25519.Ed25519PrivateKey


@pytest.fixture
def key_pool(
    rsa_key: rsa.RSAPrivateKey,
    small_rsa_key: rsa.RSAPrivateKey,
    ec_key: ec.EllipticCurvePrivateKey,
    ed_key: ed25519.Ed25519PrivateKey,
) -> Keys:
    return Keys(rsa_key, small_rsa_key, ec_key, ed_key)


def _rsa_good(keys: Keys) -> Entry:
    return public_jwk(keys.rsa, "bad")


# Each maker returns one entry with one per-key fault, and the log word for it.
FAULTY: dict[str, tuple[Callable[[Keys], Entry], str]] = {
    "1024-bit RSA": (lambda k: public_jwk(k.small, "bad"), "rsa_size"),
    "RSA exponent 1": (lambda k: {**_rsa_good(k), "e": b64(b"\x01")}, "rsa_exponent"),
    "even RSA exponent": (lambda k: {**_rsa_good(k), "e": b64(b"\x01\x00\x00")}, "rsa_exponent"),
    "exponent with a leading zero octet": (
        lambda k: {**_rsa_good(k), "e": b64(b"\x00\x01\x00\x01")},
        "encoding",
    ),
    "padded modulus": (lambda k: {**_rsa_good(k), "n": str(_rsa_good(k)["n"]) + "="}, "encoding"),
    "numeric modulus": (lambda k: {**_rsa_good(k), "n": 12}, "encoding"),
    "missing modulus": (
        lambda k: {key: v for key, v in _rsa_good(k).items() if key != "n"},
        "encoding",
    ),
    "short EC x": (lambda k: {**public_jwk(k.ec, "bad"), "x": b64(bytes(31))}, "encoding"),
    "EC point off the curve": (
        lambda k: {**public_jwk(k.ec, "bad"), "y": b64((1).to_bytes(32, "big"))},
        "key_material",
    ),
    "short Ed25519 x": (
        lambda k: {**public_jwk(k.ed, "bad"), "x": b64(bytes(31))},
        "encoding",
    ),
    "P-384 curve": (lambda k: public_jwk(ec.generate_private_key(ec.SECP384R1()), "bad"), "curve"),
    "X25519 curve": (
        lambda k: {"kty": "OKP", "crv": "X25519", "x": b64(bytes(32)), "kid": "bad"},
        "curve",
    ),
    "oct key type": (lambda k: {"kty": "oct", "kid": "bad"}, "kty"),
    "X25519 key for encryption": (
        lambda k: {"kty": "OKP", "crv": "X25519", "x": b64(bytes(32)), "use": "enc", "kid": "bad"},
        "use",
    ),
    "non-string alg": (lambda k: public_jwk(k.ec, "bad", alg=["ES256"]), "alg"),
    "HMAC alg on an RSA key": (lambda k: public_jwk(k.rsa, "bad", alg="HS256"), "alg"),
    "key_ops a string": (lambda k: public_jwk(k.ec, "bad", key_ops="verify"), "key_ops_invalid"),
    "key_ops repeated": (
        lambda k: public_jwk(k.ec, "bad", key_ops=["verify", "verify"]),
        "key_ops_invalid",
    ),
    "key_ops null": (lambda k: public_jwk(k.ec, "bad", key_ops=None), "key_ops_invalid"),
    "key_ops without verify": (
        lambda k: public_jwk(k.ec, "bad", key_ops=["encrypt"]),
        "key_ops",
    ),
    "encryption use": (lambda k: public_jwk(k.rsa, "bad", use="enc"), "use"),
}

BAD_KIDS: list[object] = [None, "", "a b", "é", "x" * 129, 7, "line\nbreak"]


@pytest.mark.parametrize("fault", list(FAULTY))
def test_an_unusable_key_beside_good_ones_is_skipped_and_logged(
    fault: str,
    key_pool: Keys,
    ec_key: ec.EllipticCurvePrivateKey,
    caplog: pytest.LogCaptureFixture,
) -> None:
    make, reason = FAULTY[fault]
    entry = make(key_pool)
    caplog.set_level(logging.INFO, logger=LOGGER)
    keys = parse(public_jwk(ec_key, "good"), entry)
    assert list(keys) == ["good"]
    assert caplog.messages == [f"jwks_key outcome=skipped kid=bad reason={reason} entry=1"]
    expected_level = logging.INFO if reason in ("use", "key_ops") else logging.WARNING
    assert [record.levelno for record in caplog.records] == [expected_level]
    assert [record.name for record in caplog.records] == [LOGGER]


@pytest.mark.parametrize("fault", list(FAULTY))
def test_a_set_of_unusable_keys_is_refused_with_each_reason(fault: str, key_pool: Keys) -> None:
    entry = FAULTY[fault][0](key_pool)
    detail = refusal(entry)
    assert detail.startswith("no usable signing key: keys[0] (kid 'bad'): ")
    assert ";" not in detail  # it separates the entries when there are several
    # The reason, never key material.
    for member in ("n", "x", "y"):
        value = entry.get(member)
        if isinstance(value, str) and len(value) > 8:
            assert value not in detail


def test_the_reasons_say_what_is_wrong(
    small_rsa_key: rsa.RSAPrivateKey, rsa_key: rsa.RSAPrivateKey
) -> None:
    detail = refusal(
        public_jwk(small_rsa_key, "old"),
        public_jwk(rsa_key, "enc", use="enc"),
        {**public_jwk(rsa_key, "odd"), "e": b64(b"\x01\x00\x00")},
        public_jwk(ec.generate_private_key(ec.SECP384R1()), "p384"),
    )
    assert detail == (
        "no usable signing key: "
        "keys[0] (kid 'old'): the RSA modulus has 1024 bits, not 2048 to 8192; "
        "keys[1] (kid 'enc'): 'use' is 'enc', not 'sig'; "
        "keys[2] (kid 'odd'): the RSA exponent must be odd and at least 3; "
        "keys[3] (kid 'p384'): curve 'P-384' is not P-256"
    )


@pytest.mark.parametrize("kid", BAD_KIDS)
def test_a_key_without_a_usable_kid_is_skipped(
    ec_key: ec.EllipticCurvePrivateKey,
    ed_key: ed25519.Ed25519PrivateKey,
    kid: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    entry = public_jwk(ec_key, "x")
    if kid is None:
        del entry["kid"]
    else:
        entry["kid"] = kid
    caplog.set_level(logging.INFO, logger=LOGGER)
    assert list(parse(entry, public_jwk(ed_key, "good"))) == ["good"]
    # The bad kid itself is never written: it could break the line or hide characters.
    assert caplog.messages == ["jwks_key outcome=skipped kid=- reason=kid entry=0"]
    detail = refusal(entry)
    assert detail == (
        "no usable signing key: keys[0] (no usable kid): "
        "it has no 'kid' of 1 to 128 printable ASCII characters"
    )


def test_a_skipped_key_may_share_a_kid_with_a_usable_one(
    ec_key: ec.EllipticCurvePrivateKey, small_rsa_key: rsa.RSAPrivateKey
) -> None:
    keys = parse(public_jwk(small_rsa_key, "same"), public_jwk(ec_key, "same"))
    assert isinstance(keys["same"].key, ec.EllipticCurvePublicKey)


def test_usable_keys_with_one_kid_refuse_the_set(
    ec_key: ec.EllipticCurvePrivateKey, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    detail = refusal(
        public_jwk(ec_key, "other"), public_jwk(ec_key, "same"), public_jwk(ed_key, "same")
    )
    assert detail == (
        "keys[1] and keys[2] are usable keys with the same kid 'same': "
        "which one signs a token would be ambiguous"
    )


def test_more_than_sixteen_entries_skipped_ones_included(
    ec_key: ec.EllipticCurvePrivateKey, rsa_key: rsa.RSAPrivateKey
) -> None:
    assert len(parse(*[public_jwk(ec_key, f"k{i}") for i in range(16)])) == 16
    skipped = [public_jwk(rsa_key, f"enc{i}", use="enc") for i in range(16)]
    detail = refusal(public_jwk(ec_key, "good"), *skipped)
    assert detail == "the key set has 17 entries; at most 16 are read, skipped ones included"


@pytest.mark.parametrize(
    ("entry_of", "named"),
    [
        (lambda k: public_jwk(k.ec, "a", d=b64(bytes(32))), "keys[0] (kid 'a') publishes"),
        # Even an entry that would be skipped: publishing a private key is the provider's
        # misconfiguration, whatever the key is for.
        (lambda k: public_jwk(k.rsa, "a", use="enc", d="AQAB", p="AQAB"), "(d, p)"),
        (lambda k: {"kty": "oct", "k": "c2VjcmV0", "kid": "sym"}, "(k)"),
        (lambda k: {"kty": "unknown", "d": "AQAB"}, "keys[0] (no usable kid)"),
        (lambda k: {**public_jwk(k.small, "a"), "qi": "AQAB"}, "(qi)"),
    ],
    ids=["usable", "encryption key", "symmetric key", "unknown type", "too small"],
)
def test_private_members_in_any_entry_refuse_the_set(
    key_pool: Keys,
    ed_key: ed25519.Ed25519PrivateKey,
    entry_of: Callable[[Keys], Entry],
    named: str,
) -> None:
    detail = refusal(entry_of(key_pool), public_jwk(ed_key, "good"))
    assert named in detail
    assert "private or secret key members" in detail
    assert "AQAB" not in detail
    assert "c2VjcmV0" not in detail


def test_document_faults_refuse_the_set(ec_key: ec.EllipticCurvePrivateKey) -> None:
    good = json.dumps(public_jwk(ec_key, "good"))
    assert refusal_of(b'{"keys": [], "keys": []}') == (
        "the key set is not one strict JSON document (duplicate_key)"
    )
    assert refusal_of(b"not json").startswith("the key set is not one strict JSON document")
    assert refusal_of(b"[]") == "the key set is not a JSON object"
    assert refusal_of(b'{"keys": {}}') == "the key set has no 'keys' array"
    assert refusal_of(b"{}") == "the key set has no 'keys' array"
    assert refusal_of(b'{"keys": []}') == "no usable signing key: the 'keys' array is empty"
    assert refusal_of(f'{{"keys": [{good}, 3]}}'.encode()) == "keys[1] is not a JSON object"


def test_skips_are_logged_once_per_parse_in_entry_order(
    small_rsa_key: rsa.RSAPrivateKey,
    rsa_key: rsa.RSAPrivateKey,
    ec_key: ec.EllipticCurvePrivateKey,
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = json.dumps(
        {
            "keys": [
                public_jwk(rsa_key, "enc", use="enc"),
                public_jwk(ec_key, "good"),
                public_jwk(small_rsa_key, "old"),
            ]
        }
    ).encode()
    caplog.set_level(logging.INFO, logger=LOGGER)
    parse_jwks(body)
    parse_jwks(body)
    once = [
        "jwks_key outcome=skipped kid=enc reason=use entry=0",
        "jwks_key outcome=skipped kid=old reason=rsa_size entry=2",
    ]
    assert caplog.messages == once + once


# --- the rules as one model -----------------------------------------------------------

# (kind, kid): "good" is usable, "skip" has a per-key fault, "private" carries `d`.
_ENTRY = st.tuples(st.sampled_from(["good", "skip", "private"]), st.sampled_from("abcd"))


@given(entries=st.lists(_ENTRY, max_size=18))
def test_the_set_is_refused_exactly_for_set_faults(
    entries: list[tuple[str, str]],
    ec_key: ec.EllipticCurvePrivateKey,
    small_rsa_key: rsa.RSAPrivateKey,
) -> None:
    def entry(kind: str, kid: str) -> Entry:
        if kind == "good":
            return public_jwk(ec_key, kid)
        if kind == "skip":
            return public_jwk(small_rsa_key, kid)
        return public_jwk(ec_key, kid, use="enc", d=b64(bytes(32)))

    usable = [kid for kind, kid in entries if kind == "good"]
    refused = (
        len(entries) > 16
        or any(kind == "private" for kind, _ in entries)
        or len(set(usable)) != len(usable)
        or not usable
    )
    body = json.dumps({"keys": [entry(kind, kid) for kind, kid in entries]}).encode()
    if refused:
        assert refusal_of(body)
    else:
        assert set(parse_jwks(body)) == set(usable)


# --- what `mymcp check` and a server start show ---------------------------------------


# Minting with the 1024-bit key is the point here, not a mistake pyjwt should warn about.
@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_startup_survives_an_unusable_key_beside_good_ones(
    small_rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    idp = FakeIssuer(keys=[public_jwk(small_rsa_key, "old"), public_jwk(ec_key, "good")])
    auth = build_authenticator(
        oauth_settings(), SERVER, http_client_factory=idp.factory(), clock=FakeClock()
    )
    good = run(auth.authenticate([f"Bearer {mint(ec_key, alg='ES256', kid='good')}"]))
    assert isinstance(good, Principal)
    # The skipped key is never trusted, however its tokens are signed.
    old = run(auth.authenticate([f"Bearer {mint(small_rsa_key, alg='RS256', kid='old')}"]))
    assert old is AuthFailure.REJECTED


def test_a_refused_set_names_its_reason_at_startup(
    ec_key: ec.EllipticCurvePrivateKey, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    idp = FakeIssuer(keys=[public_jwk(ec_key, "same"), public_jwk(ed_key, "same")])
    with pytest.raises(HostAuthenticationCompositionError) as info:
        build_authenticator(oauth_settings(), SERVER, http_client_factory=idp.factory())
    assert info.value.code == "oauth_validation_source"
    assert "jwks_invalid" in str(info.value)
    assert "the same kid 'same'" in str(info.value)


def test_a_download_while_serving_logs_its_skipped_keys_quietly(
    small_rsa_key: rsa.RSAPrivateKey,
    ec_key: ec.EllipticCurvePrivateKey,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Any token naming an unknown key may cause one download a minute: its skipped keys,
    # warned about at the start, are not warned about again each time.
    caplog.set_level(logging.INFO, logger=LOGGER)
    body = json.dumps({"keys": [public_jwk(ec_key, "good"), public_jwk(small_rsa_key, "old")]})
    assert list(parse_jwks(body.encode(), quiet=True)) == ["good"]
    assert caplog.messages == ["jwks_key outcome=skipped kid=old reason=rsa_size entry=1"]
    assert [record.levelno for record in caplog.records] == [logging.INFO]

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from mymcp.auth._jwks import parse_jwks
from mymcp.errors import DiscoveryError
from tests.auth.helpers import b64, public_jwk


def parse(*entries: object) -> dict[str, object]:
    return dict(parse_jwks(json.dumps({"keys": list(entries)}).encode()))


def invalid(*entries: object) -> None:
    with pytest.raises(DiscoveryError) as info:
        parse(*entries)
    assert info.value.code == "jwks_invalid"


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
    assert keys["r"].algorithms == {"RS256", "PS256"}  # type: ignore[attr-defined]
    assert keys["e"].algorithms == {"ES256"}  # type: ignore[attr-defined]
    assert keys["o"].algorithms == {"EdDSA"}  # type: ignore[attr-defined]
    assert isinstance(keys["r"].key, rsa.RSAPublicKey)  # type: ignore[attr-defined]
    assert isinstance(keys["o"].key, ed25519.Ed25519PublicKey)  # type: ignore[attr-defined]


def test_rsa_alg_pins_the_algorithm(rsa_key: rsa.RSAPrivateKey) -> None:
    assert parse(public_jwk(rsa_key, "r", alg="PS256"))["r"].algorithms == {"PS256"}  # type: ignore[attr-defined]


def test_unusable_entries_are_skipped(
    rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    p384 = ec.generate_private_key(ec.SECP384R1())
    keys = parse(
        public_jwk(rsa_key, "enc", use="enc"),
        public_jwk(rsa_key, "oaep", alg="RSA-OAEP"),
        public_jwk(rsa_key, "hs", alg="HS256"),
        public_jwk(rsa_key, "ops", key_ops=["encrypt"]),
        public_jwk(p384, "p384"),
        {"kty": "oct", "k": "c2VjcmV0", "kid": "sym"},
        {"kty": "OKP", "crv": "X25519", "x": b64(bytes(32)), "kid": "x"},
        {"kty": ["RSA"], "kid": "weird"},
        public_jwk(ec_key, "ok"),
    )
    assert list(keys) == ["ok"]


def test_no_usable_key_or_empty_set(rsa_key: rsa.RSAPrivateKey) -> None:
    invalid(public_jwk(rsa_key, "enc", use="enc"))
    invalid()
    with pytest.raises(DiscoveryError):
        parse_jwks(b'{"keys": {}}')
    with pytest.raises(DiscoveryError):
        parse_jwks(b"[]")


def test_more_than_sixteen_entries(ec_key: ec.EllipticCurvePrivateKey) -> None:
    assert len(parse(*[public_jwk(ec_key, f"k{i}") for i in range(16)])) == 16
    invalid(*[public_jwk(ec_key, f"k{i}") for i in range(17)])


def test_duplicate_kids(
    ec_key: ec.EllipticCurvePrivateKey, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    invalid(public_jwk(ec_key, "same"), public_jwk(ed_key, "same"))


@pytest.mark.parametrize("key_ops", ["verify", [1], ["verify", "verify"], None])
def test_malformed_key_ops_rejects_the_set(
    ec_key: ec.EllipticCurvePrivateKey, key_ops: object
) -> None:
    invalid(public_jwk(ec_key, "a", key_ops=key_ops), public_jwk(ec_key, "b"))


@pytest.mark.parametrize("kid", [None, "", "a b", "é", "x" * 129, 7])
def test_bad_kid_on_a_usable_key(ec_key: ec.EllipticCurvePrivateKey, kid: object) -> None:
    entry = public_jwk(ec_key, "x")
    if kid is None:
        del entry["kid"]
    else:
        entry["kid"] = kid
    invalid(entry)


def test_private_members_reject_the_set(ec_key: ec.EllipticCurvePrivateKey) -> None:
    invalid(public_jwk(ec_key, "a", d=b64(bytes(32))))


def test_rsa_material_rules(rsa_key: rsa.RSAPrivateKey) -> None:
    good = public_jwk(rsa_key, "r")
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505
    invalid(public_jwk(small, "small"))
    invalid({**good, "e": b64(b"\x00\x01\x00\x01")})  # leading zero octet
    invalid({**good, "e": b64(b"\x01\x00\x00")})  # even exponent
    invalid({**good, "e": b64(b"\x01")})  # exponent 1
    invalid({**good, "n": good["n"] + "="})  # type: ignore[operator]
    invalid({**good, "n": 12})


def test_ec_and_okp_material_rules(
    ec_key: ec.EllipticCurvePrivateKey, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    good = public_jwk(ec_key, "e")
    invalid({**good, "x": b64(bytes(31))})
    invalid({**good, "y": b64((int.from_bytes(bytes(32), "big") + 1).to_bytes(32, "big"))})
    invalid({**public_jwk(ed_key, "o"), "x": b64(bytes(31))})


def test_non_string_alg_rejects_the_set(ec_key: ec.EllipticCurvePrivateKey) -> None:
    invalid(public_jwk(ec_key, "a", alg=["ES256"]), public_jwk(ec_key, "b"))


def test_duplicate_json_members_reject_the_set() -> None:
    with pytest.raises(DiscoveryError):
        parse_jwks(b'{"keys": [], "keys": []}')

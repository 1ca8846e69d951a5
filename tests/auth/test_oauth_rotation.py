"""Key rotation: an unknown kid refetches the JWKS at most once per 60 s (injected clock)."""

from __future__ import annotations

import asyncio

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from mymcp.auth import Authenticator, AuthFailure, Principal, build_authenticator
from tests.auth.helpers import (
    JWKS_URI,
    SERVER,
    FakeClock,
    FakeIssuer,
    claims,
    mint,
    oauth_settings,
    public_jwk,
    raw_jws,
    run,
)

Setup = tuple[FakeIssuer, FakeClock, Authenticator]


@pytest.fixture
def setup(rsa_key: rsa.RSAPrivateKey) -> Setup:
    idp = FakeIssuer(keys=[public_jwk(rsa_key, "old")])
    clock = FakeClock()
    auth = build_authenticator(
        oauth_settings(), SERVER, http_client_factory=idp.factory(), clock=clock
    )
    assert idp.count(JWKS_URI) == 1
    return idp, clock, auth


def check(auth: Authenticator, token: str) -> Principal | AuthFailure:
    return run(auth.authenticate([f"Bearer {token}"]))


def test_known_kid_never_refetches(setup: Setup, rsa_key: rsa.RSAPrivateKey) -> None:
    idp, _, auth = setup
    for _ in range(3):
        assert isinstance(check(auth, mint(rsa_key, alg="RS256", kid="old")), Principal)
    assert idp.count(JWKS_URI) == 1


def test_new_kid_is_accepted_without_rebuilding(
    setup: Setup, rsa_key: rsa.RSAPrivateKey, rsa_key_2: rsa.RSAPrivateKey
) -> None:
    idp, _, auth = setup
    idp.keys = [public_jwk(rsa_key_2, "new")]
    assert isinstance(check(auth, mint(rsa_key_2, alg="RS256", kid="new")), Principal)
    assert idp.count(JWKS_URI) == 2
    # The retired key left the set with the refetch.
    assert check(auth, mint(rsa_key, alg="RS256", kid="old")) is AuthFailure.REJECTED


def test_second_unknown_kid_within_sixty_seconds_does_not_refetch(
    setup: Setup, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    idp, clock, auth = setup
    assert check(auth, mint(ec_key, alg="ES256", kid="first-unknown")) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 2
    idp.keys.append(public_jwk(ec_key, "second"))
    clock.mono += 59.9
    assert check(auth, mint(ec_key, alg="ES256", kid="second")) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 2
    clock.mono += 0.1
    assert isinstance(check(auth, mint(ec_key, alg="ES256", kid="second")), Principal)
    assert idp.count(JWKS_URI) == 3


def test_failed_refetch_keeps_the_current_keys(
    setup: Setup, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    idp, clock, auth = setup
    idp.overrides[JWKS_URI] = (500, b"")
    assert check(auth, mint(ec_key, alg="ES256", kid="unknown")) is AuthFailure.REJECTED
    clock.mono += 60
    idp.overrides[JWKS_URI] = (200, {"keys": [{"kty": "RSA", "use": "enc"}]})  # no usable key
    assert check(auth, mint(ec_key, alg="ES256", kid="unknown")) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 3
    assert isinstance(check(auth, mint(rsa_key, alg="RS256", kid="old")), Principal)


def test_unsigned_garbage_with_unknown_kids_is_throttled(setup: Setup) -> None:
    idp, _, auth = setup
    for index in range(20):
        check(auth, raw_jws({"alg": "RS256", "kid": f"k{index}"}, claims(), b"sig"))
    assert idp.count(JWKS_URI) == 2


def test_concurrent_unknown_kids_share_one_refetch(
    setup: Setup, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    idp, _, auth = setup
    idp.keys.append(public_jwk(ec_key, "fresh"))
    token = mint(ec_key, alg="ES256", kid="fresh")

    async def many() -> list[Principal | AuthFailure]:
        return await asyncio.gather(*(auth.authenticate([f"Bearer {token}"]) for _ in range(8)))

    outcomes = asyncio.run(many())
    assert all(isinstance(outcome, Principal) for outcome in outcomes)
    assert idp.count(JWKS_URI) == 2


@pytest.mark.parametrize(
    "bad_claims",
    [
        {"iss": "https://other.example"},
        {"aud": "http://127.0.0.1:9/mcp"},
        {"exp": 1},
        {"sub": " "},
    ],
)
def test_tokens_with_failing_claims_do_not_spend_the_refetch_budget(
    setup: Setup, rsa_key_2: rsa.RSAPrivateKey, bad_claims: dict[str, object]
) -> None:
    idp, _, auth = setup
    idp.keys = [public_jwk(rsa_key_2, "new")]
    junk = mint(rsa_key_2, alg="RS256", kid="made-up", payload=claims(**bad_claims))
    assert check(auth, junk) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 1
    # A genuine rotation right after the junk is still picked up at once.
    assert isinstance(check(auth, mint(rsa_key_2, alg="RS256", kid="new")), Principal)
    assert idp.count(JWKS_URI) == 2

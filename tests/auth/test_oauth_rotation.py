"""Key rotation: an unknown kid refetches the JWKS at most once per 60 s (injected clock),
and only a few requests may wait for a download that is running."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from mymcp.auth import Authenticator, AuthFailure, Principal, build_authenticator
from mymcp.auth._oauth import KEY_SET_MAX_AGE_SECONDS, MAX_REFETCH_WAITERS
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
    setup: Setup,
    rsa_key: rsa.RSAPrivateKey,
    ec_key: ec.EllipticCurvePrivateKey,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mymcp.host.authentication")
    idp, clock, auth = setup
    idp.overrides[JWKS_URI] = (500, b"")
    assert check(auth, mint(ec_key, alg="ES256", kid="unknown")) is AuthFailure.REJECTED
    clock.mono += 60
    idp.overrides[JWKS_URI] = (200, {"keys": [{"kty": "RSA", "use": "enc"}]})  # no usable key
    assert check(auth, mint(ec_key, alg="ES256", kid="unknown")) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 3
    assert isinstance(check(auth, mint(rsa_key, alg="RS256", kid="old")), Principal)
    # Each failed download is said, without a URL or key material, so a rotation that
    # cannot be fetched does not show only as tokens refused.
    refreshes = [r.getMessage() for r in caplog.records if "jwks_refresh" in r.getMessage()]
    assert refreshes == [
        "jwks_refresh outcome=error code=jwks_unavailable",
        "jwks_refresh outcome=error code=jwks_invalid",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records if "jwks_refresh" in r.msg)


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
        requests = (auth.authenticate([f"Bearer {token}"]) for _ in range(1 + MAX_REFETCH_WAITERS))
        return await asyncio.gather(*requests)

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


@dataclass
class SlowIssuer(FakeIssuer):
    """Once `hold` is set, each key download blocks until the test sets `release`."""

    hold: bool = False
    downloading: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.hold and str(request.url) == self.jwks_uri:
            self.downloading.set()
            self.release.wait(timeout=10)  # only bounds a broken test; the test sets it
        return super().handle(request)


def test_only_a_few_requests_wait_for_a_running_download(
    rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    # Forged tokens naming an unknown key need no secret; if each could wait for a slow
    # download, they would take up every request slot the server has.
    idp = SlowIssuer(keys=[public_jwk(rsa_key, "old")])
    clock = FakeClock()
    auth = build_authenticator(
        oauth_settings(), SERVER, http_client_factory=idp.factory(), clock=clock
    )
    idp.keys.append(public_jwk(ec_key, "fresh"))
    idp.hold = True
    fresh = [f"Bearer {mint(ec_key, alg='ES256', kid='fresh')}"]
    known = [f"Bearer {mint(rsa_key, alg='RS256', kid='old')}"]

    async def scenario() -> None:
        first = asyncio.create_task(auth.authenticate(fresh))
        assert await asyncio.to_thread(idp.downloading.wait, 10)
        waiting = [
            asyncio.create_task(auth.authenticate(fresh)) for _ in range(MAX_REFETCH_WAITERS)
        ]
        # Tasks run in the order they were made, so every waiter is queued on the
        # download before these start; these are answered while it still runs.
        refused = await asyncio.gather(*(auth.authenticate(fresh) for _ in range(3)))
        assert refused == [AuthFailure.REJECTED] * 3
        assert isinstance(await auth.authenticate(known), Principal)
        assert not first.done()
        assert not any(task.done() for task in waiting)
        idp.release.set()
        outcomes = await asyncio.gather(first, *waiting)
        assert all(isinstance(outcome, Principal) for outcome in outcomes)

    try:
        asyncio.run(scenario())
    finally:
        idp.release.set()
    assert idp.count(JWKS_URI) == 2
    # The places in line were given back: the next rotation, a minute on, is seen again.
    idp.hold = False
    idp.keys.append(public_jwk(ec_key, "later"))
    clock.mono += 60
    assert isinstance(check(auth, mint(ec_key, alg="ES256", kid="later")), Principal)
    assert idp.count(JWKS_URI) == 3


def test_a_refusal_while_downloading_is_the_unknown_key_refusal(
    rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    # One more than may wait is refused the same way as a token during the quiet minute
    # after a download: a rejected token, not a different error a prober could tell apart.
    idp = SlowIssuer(keys=[public_jwk(rsa_key, "old")])
    auth = build_authenticator(
        oauth_settings(), SERVER, http_client_factory=idp.factory(), clock=FakeClock()
    )
    idp.hold = True
    unknown = [f"Bearer {mint(ec_key, alg='ES256', kid='nowhere')}"]

    async def scenario() -> tuple[Principal | AuthFailure, Principal | AuthFailure]:
        first = asyncio.create_task(auth.authenticate(unknown))
        assert await asyncio.to_thread(idp.downloading.wait, 10)
        waiting = [
            asyncio.create_task(auth.authenticate(unknown)) for _ in range(MAX_REFETCH_WAITERS)
        ]
        # A task, so that it starts after the waiters (tasks run in the order made).
        during = await asyncio.create_task(auth.authenticate(unknown))
        assert not first.done()  # answered while the download still runs
        idp.release.set()
        await asyncio.gather(first, *waiting)
        after = await auth.authenticate(unknown)
        return during, after

    try:
        during, after = asyncio.run(scenario())
    finally:
        idp.release.set()
    assert during is after is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 2


def test_a_withdrawn_key_stops_working_once_the_key_set_is_old(
    setup: Setup, rsa_key: rsa.RSAPrivateKey, rsa_key_2: rsa.RSAPrivateKey
) -> None:
    # The provider withdrew "old" (it leaked, say); no token names a new key id, so only
    # the key set's age can bring the withdrawal in.
    idp, clock, auth = setup
    idp.keys = [public_jwk(rsa_key_2, "new")]
    clock.mono += KEY_SET_MAX_AGE_SECONDS - 1
    assert isinstance(check(auth, mint(rsa_key, alg="RS256", kid="old")), Principal)
    assert idp.count(JWKS_URI) == 1
    clock.mono += 1
    assert check(auth, mint(rsa_key, alg="RS256", kid="old")) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 2
    assert isinstance(check(auth, mint(rsa_key_2, alg="RS256", kid="new")), Principal)
    assert idp.count(JWKS_URI) == 2  # fresh again: no download per request


def test_an_old_key_set_that_cannot_be_downloaded_stays_in_use(
    setup: Setup, rsa_key: rsa.RSAPrivateKey
) -> None:
    idp, clock, auth = setup
    idp.overrides[JWKS_URI] = (500, b"")
    clock.mono += KEY_SET_MAX_AGE_SECONDS
    for _ in range(3):
        assert isinstance(check(auth, mint(rsa_key, alg="RS256", kid="old")), Principal)
    assert idp.count(JWKS_URI) == 2  # tried once
    # The next look is a whole age later: a provider that is down does not hold up a
    # request every minute.
    clock.mono += KEY_SET_MAX_AGE_SECONDS - 1
    assert isinstance(check(auth, mint(rsa_key, alg="RS256", kid="old")), Principal)
    assert idp.count(JWKS_URI) == 2
    clock.mono += 1
    check(auth, mint(rsa_key, alg="RS256", kid="old"))
    assert idp.count(JWKS_URI) == 3


def test_an_age_download_held_back_by_the_minute_budget_is_tried_after_it(
    setup: Setup, rsa_key: rsa.RSAPrivateKey, rsa_key_2: rsa.RSAPrivateKey
) -> None:
    # A download for an unknown key id fails just before the set grows old; the age's
    # own download, held back by the once-a-minute budget, must not count as done, or
    # a withdrawn key would stay trusted for a second quarter of an hour.
    idp, clock, auth = setup
    clock.mono += KEY_SET_MAX_AGE_SECONDS - 10
    idp.overrides[JWKS_URI] = (500, b"")
    assert check(auth, mint(rsa_key_2, alg="RS256", kid="unknown")) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 2
    del idp.overrides[JWKS_URI]
    idp.keys = [public_jwk(rsa_key_2, "new")]  # "old" withdrawn
    clock.mono += 15  # old now, but within the minute of the failed download
    assert isinstance(check(auth, mint(rsa_key, alg="RS256", kid="old")), Principal)
    assert idp.count(JWKS_URI) == 2
    clock.mono += 60  # the minute is over: the old set is downloaded again
    assert check(auth, mint(rsa_key, alg="RS256", kid="old")) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 3


def test_new_key_material_under_a_known_kid_is_looked_up(
    setup: Setup, rsa_key: rsa.RSAPrivateKey, rsa_key_2: rsa.RSAPrivateKey
) -> None:
    # Without it, every new token would be refused until a restart.
    idp, _, auth = setup
    idp.keys = [public_jwk(rsa_key_2, "old")]
    assert isinstance(check(auth, mint(rsa_key_2, alg="RS256", kid="old")), Principal)
    assert idp.count(JWKS_URI) == 2
    assert check(auth, mint(rsa_key, alg="RS256", kid="old")) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 2  # the once-a-minute budget holds for this path too


def test_bad_signatures_under_a_known_kid_are_throttled(setup: Setup) -> None:
    idp, clock, auth = setup
    for _ in range(20):
        token = raw_jws({"alg": "RS256", "kid": "old", "typ": "at+jwt"}, claims(), b"sig")
        assert check(auth, token) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 2
    # A token whose claims fail spends no download, even after the minute.
    clock.mono += 60
    expired = raw_jws({"alg": "RS256", "kid": "old"}, claims(exp=1), b"sig")
    assert check(auth, expired) is AuthFailure.REJECTED
    assert idp.count(JWKS_URI) == 2

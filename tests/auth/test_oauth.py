from __future__ import annotations

import hashlib
import hmac
import json

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from mymcp.auth import Authenticator, AuthFailure, Principal, build_authenticator
from mymcp.auth._oauth import project_subject, token_scopes
from tests.auth.helpers import (
    AUDIENCE,
    ISSUER,
    NOW,
    SERVER,
    FakeClock,
    FakeIssuer,
    b64,
    claims,
    mint,
    oauth_settings,
    public_jwk,
    raw_jws,
    run,
)


@pytest.fixture(scope="module")
def idp(
    rsa_key: rsa.RSAPrivateKey,
    ec_key: ec.EllipticCurvePrivateKey,
    ed_key: ed25519.Ed25519PrivateKey,
) -> FakeIssuer:
    issuer = FakeIssuer()
    issuer.keys = [
        public_jwk(rsa_key, "rsa", use="sig"),
        public_jwk(ec_key, "ec", alg="ES256"),
        public_jwk(ed_key, "ed"),
    ]
    return issuer


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def auth(idp: FakeIssuer, clock: FakeClock) -> Authenticator:
    return build_authenticator(
        oauth_settings(), SERVER, http_client_factory=idp.factory(), clock=clock
    )


def check(auth: Authenticator, token: str) -> Principal | AuthFailure:
    return run(auth.authenticate([f"Bearer {token}"]))


@pytest.mark.parametrize(
    ("key_name", "alg", "kid"),
    [
        ("rsa_key", "RS256", "rsa"),
        ("rsa_key", "PS256", "rsa"),
        ("ec_key", "ES256", "ec"),
        ("ed_key", "EdDSA", "ed"),
    ],
)
def test_valid_tokens(
    auth: Authenticator, request: pytest.FixtureRequest, key_name: str, alg: str, kid: str
) -> None:
    token = mint(request.getfixturevalue(key_name), alg=alg, kid=kid)
    principal = check(auth, token)
    assert isinstance(principal, Principal)
    expected_subject = project_subject(ISSUER, "alice")
    digest = hashlib.sha256(f"{ISSUER}\x00alice".encode()).digest()
    assert expected_subject == "oauth-jwt-v1:" + b64(digest)
    assert principal.subject == expected_subject
    assert principal.adapter_id == "local-oauth"
    assert principal.principal_id == "registered:local-oauth:" + b64(expected_subject.encode())


@pytest.mark.parametrize("groups", [150, 230])
def test_a_token_with_a_large_payload_is_accepted_up_to_the_credential_bound(
    auth: Authenticator, rsa_key: rsa.RSAPrivateKey, groups: int
) -> None:
    """Identity providers put many group claims in the payload: any part of the token
    may be long, as long as the whole credential fits its 8192 bytes."""
    payload = claims(groups=[f"team-{index:04}-engineering" for index in range(groups)])
    token = mint(rsa_key, alg="RS256", kid="rsa", payload=payload)
    assert len(token.split(".")[1]) > 4096  # beyond a bound parts once had of their own
    assert len(token) <= 8192
    assert isinstance(check(auth, token), Principal)
    longer = mint(rsa_key, alg="RS256", kid="rsa", payload={**payload, "pad": "x" * 8192})
    assert len(longer) > 8192
    assert check(auth, longer) is AuthFailure.MALFORMED


def test_protected_resource_metadata_and_challenge(auth: Authenticator) -> None:
    assert auth.protected_resource_metadata == {
        "resource": AUDIENCE,
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
    }
    url = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
    assert auth.challenge_headers(AuthFailure.NO_EVIDENCE, token_presented=False) == {
        "WWW-Authenticate": f'Bearer resource_metadata="{url}"'
    }
    assert run(auth.authenticate([])) is AuthFailure.NO_EVIDENCE


@pytest.mark.parametrize("scheme", ["Basic", "DPoP"])
def test_an_unsupported_scheme_gets_the_challenge_without_an_error(
    auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey, scheme: str
) -> None:
    # RFC 6750: a request that does not use a method we take is told how to authenticate,
    # as one without credentials is, not that its (non-bearer) token is invalid.
    credential = b64(b"alice:secret") if scheme == "Basic" else mint(ec_key, alg="ES256", kid="ec")
    outcome = run(auth.authenticate([f"{scheme} {credential}"]))
    assert outcome is AuthFailure.UNSUPPORTED
    url = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
    assert auth.challenge_headers(outcome, token_presented=True) == {
        "WWW-Authenticate": f'Bearer resource_metadata="{url}"'
    }
    # A bearer token that fails is judged, and its refusal says so.
    refused = run(auth.authenticate([f"Bearer {b64(b'alice:secret')}"]))
    assert refused is AuthFailure.MALFORMED
    assert auth.challenge_headers(refused, token_presented=True) == {
        "WWW-Authenticate": f'Bearer resource_metadata="{url}", error="invalid_token"'
    }


@pytest.mark.parametrize("typ", [None, "JWT", "jwt", "at+jwt", "application/at+jwt", "AT+JWT"])
def test_accepted_typ(
    auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey, typ: str | None
) -> None:
    token = mint(ec_key, alg="ES256", kid="ec", headers={"typ": typ})  # None drops it
    header = json.loads(jwt.utils.base64url_decode(token.split(".")[0]))
    assert header.get("typ") == typ
    assert isinstance(check(auth, token), Principal)


@pytest.mark.parametrize("typ", ["dpop+jwt", "JOSE", 1, "at+jwt "])
def test_rejected_typ(auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey, typ: object) -> None:
    assert (
        check(auth, mint(ec_key, alg="ES256", kid="ec", headers={"typ": typ}))
        is AuthFailure.REJECTED
    )


def test_extra_header_members_are_ignored(
    auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    headers = {"jku": "https://evil.example.com/jwks", "x5t": "abc", "cty": "x"}
    assert isinstance(check(auth, mint(ec_key, alg="ES256", kid="ec", headers=headers)), Principal)


def test_unknown_crit_is_rejected(auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey) -> None:
    token = mint(ec_key, alg="ES256", kid="ec", headers={"crit": ["exp"], "exp": 1})
    assert check(auth, token) is AuthFailure.REJECTED


@pytest.mark.parametrize(
    "payload",
    [
        claims(exp=NOW - 31),
        claims(iat=NOW - 7200, exp=NOW - 3600),
        claims(nbf=NOW + 31),
        claims(iat=NOW + 31, exp=NOW + 600),
        claims(aud="http://127.0.0.1:8001/mcp"),
        claims(aud="http://localhost:8000/mcp"),
        claims(aud="http://127.0.0.1:8000/mcp/"),
        claims(aud=["https://api.example.com"]),
        claims(aud=[]),
        claims(aud=[AUDIENCE, 5]),
        claims(iss="https://idp.mymcp.test/realms/other"),
        claims(iss=ISSUER + "/"),
        claims(exp=float(NOW + 60)),
        claims(iat=float(NOW)),
        claims(nbf=float(NOW)),
        claims(exp=True),
        claims(exp=str(NOW + 60)),
        claims(iat=-1),
        claims(exp=NOW, iat=NOW),
        claims(sub=""),
        claims(sub=" "),
        claims(sub="a\u0000"),
        claims(sub=12),
    ],
)
def test_rejected_claims(
    auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey, payload: dict[str, object]
) -> None:
    assert check(auth, mint(ec_key, alg="ES256", kid="ec", payload=payload)) is AuthFailure.REJECTED


@pytest.mark.parametrize(
    "payload",
    [
        claims(iat=NOW - 100, exp=NOW - 30),
        claims(nbf=NOW + 30),
        claims(iat=NOW + 30, exp=NOW + 60),
        claims(aud=["https://api.example.com", AUDIENCE]),
        claims(iat=NOW - 86400 * 30, exp=NOW + 86400 * 30),  # no 300 s lifetime cap
        claims(scope="openid", azp="client", client_id="c", jti="j"),
        claims(sub="Zoë"),
    ],
)
def test_accepted_edges(
    auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey, payload: dict[str, object]
) -> None:
    assert isinstance(check(auth, mint(ec_key, alg="ES256", kid="ec", payload=payload)), Principal)


@pytest.mark.parametrize("missing", ["iss", "aud", "sub", "exp", "iat"])
def test_missing_required_claim_is_malformed(
    auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey, missing: str
) -> None:
    payload = claims(**{missing: None})
    assert (
        check(auth, mint(ec_key, alg="ES256", kid="ec", payload=payload)) is AuthFailure.MALFORMED
    )


def test_client_id_and_jti_are_not_required(
    auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    payload = claims()
    assert "client_id" not in payload
    assert "jti" not in payload
    assert isinstance(check(auth, mint(ec_key, alg="ES256", kid="ec", payload=payload)), Principal)


def test_alg_none_is_refused(auth: Authenticator) -> None:
    unsigned = raw_jws({"alg": "none", "kid": "ec"}, claims(), b"")
    assert check(auth, unsigned) is AuthFailure.MALFORMED  # empty signature segment
    padded = raw_jws({"alg": "none", "kid": "ec"}, claims(), b"x")
    assert check(auth, padded) is AuthFailure.REJECTED


def test_hs256_with_the_public_key_as_secret_is_refused(
    auth: Authenticator, rsa_key: rsa.RSAPrivateKey
) -> None:
    public_pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "kid": "rsa", "typ": "at+jwt"}
    segments = raw_jws(header, claims(), b"").rsplit(".", 1)[0]
    signature = hmac.new(public_pem, segments.encode(), hashlib.sha256).digest()
    assert check(auth, f"{segments}.{b64(signature)}") is AuthFailure.REJECTED


def test_algorithm_must_match_the_key(
    auth: Authenticator, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    # An EC-signed token that names the RSA key, and an RSA token that names the EC key.
    assert check(auth, mint(ec_key, alg="ES256", kid="rsa")) is AuthFailure.REJECTED
    assert check(auth, mint(rsa_key, alg="RS256", kid="ec")) is AuthFailure.REJECTED


@pytest.mark.parametrize("alg", ["RS384", "ES384", "HS256", "none", "es256", 7, ["ES256"], None])
def test_alg_allow_list(auth: Authenticator, alg: object) -> None:
    assert check(auth, raw_jws({"alg": alg, "kid": "ec"}, claims(), b"sig")) is AuthFailure.REJECTED


def test_bad_signature_is_rejected_before_claims_are_read(
    auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey, rsa_key: rsa.RSAPrivateKey
) -> None:
    token = mint(ec_key, alg="ES256", kid="ec")
    head, _, sig = token.split(".")
    garbage = b64(b"not json at all")
    assert check(auth, f"{head}.{garbage}.{sig}") is AuthFailure.REJECTED
    forged = mint(rsa_key_other := rsa_key, alg="RS256", kid="rsa")
    del rsa_key_other
    head2, body2, sig2 = forged.split(".")
    flipped = b64(
        bytes([jwt.utils.base64url_decode(sig2)[0] ^ 1]) + jwt.utils.base64url_decode(sig2)[1:]
    )
    assert check(auth, f"{head2}.{body2}.{flipped}") is AuthFailure.REJECTED


def test_valid_signature_over_invalid_payload_json_is_malformed(
    auth: Authenticator, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    header = b64(json.dumps({"alg": "ES256", "kid": "ec"}).encode())
    body = b64(b'{"sub": "a", "sub": "b"}')
    signature = jwt.algorithms.ECAlgorithm(jwt.algorithms.ECAlgorithm.SHA256).sign(
        f"{header}.{body}".encode(), ec_key
    )
    assert check(auth, f"{header}.{body}.{b64(signature)}") is AuthFailure.MALFORMED


@pytest.mark.parametrize(
    "token",
    [
        "a.b",
        "a.b.c.d",
        "..",
        "a..c",
        "é.b.c",
        "eyJ=.eyJ.sig",
        "e+J.eyJ.sig",
        "A" * 4097 + ".eyJ.sig",
        b64(b"[]") + ".eyJ9.c2ln",
        b64(b'{"alg":"ES256","alg":"ES256","kid":"ec"}') + ".eyJ9.c2ln",
    ],
)
def test_shape_and_header_json(auth: Authenticator, token: str) -> None:
    assert check(auth, token) is AuthFailure.MALFORMED


@pytest.mark.parametrize("kid", [None, "", "x" * 129, "a b", 5])
def test_kid_rules(auth: Authenticator, kid: object) -> None:
    header: dict[str, object] = {"alg": "ES256"}
    if kid is not None:
        header["kid"] = kid
    assert check(auth, raw_jws(header, claims(), b"s")) is AuthFailure.REJECTED


def test_expiry_follows_the_injected_clock(
    idp: FakeIssuer, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    clock = FakeClock()
    auth = build_authenticator(
        oauth_settings(), SERVER, http_client_factory=idp.factory(), clock=clock
    )
    token = mint(ec_key, alg="ES256", kid="ec", payload=claims(exp=NOW + 100))
    assert isinstance(check(auth, token), Principal)
    clock.wall = NOW + 130
    assert isinstance(check(auth, token), Principal)
    clock.wall = NOW + 131
    assert check(auth, token) is AuthFailure.REJECTED


@pytest.mark.parametrize(
    ("claims_in", "expected"),
    [
        ({"scope": "memory.read memory.write"}, {"memory.read", "memory.write"}),
        ({"scp": ["memory.read", "admin"]}, {"memory.read", "admin"}),
        ({"scp": "memory.read"}, {"memory.read"}),
        ({"scope": "a  b"}, {"a", "b"}),
        ({"scope": 'ok bad"quote back\\slash'}, {"ok"}),
        ({"scope": 7, "scp": [1, None, "x"]}, {"x"}),
        # Both claims: the standard one alone, never the union of the two.
        ({"scope": "memory.read", "scp": ["memory.write"]}, {"memory.read"}),
        ({"scope": "", "scp": ["memory.write"]}, set()),
        ({"scope": ["memory.read", "admin"]}, {"memory.read", "admin"}),
        ({"scope": ["memory.read"], "scp": "memory.write"}, {"memory.read"}),
        ({}, set()),
    ],
)
def test_token_scopes_come_from_scope_or_scp(
    claims_in: dict[str, object], expected: set[str]
) -> None:
    assert token_scopes(claims_in) == expected


def test_scopes_are_bounded_after_repeats_are_dropped() -> None:
    sixty_four = [f"s{i}" for i in range(64)]
    assert token_scopes({"scope": " ".join(sixty_four)}) == set(sixty_four)
    # A scope repeated counts once: it never pushes another scope out.
    repeated = ["f"] * 100 + ["w"]
    assert token_scopes({"scope": " ".join(repeated)}) == {"f", "w"}
    assert token_scopes({"scp": repeated}) == {"f", "w"}
    # More different scopes than the bound: nothing is kept, the token is refused.
    assert token_scopes({"scope": " ".join([*sixty_four, "w"])}) is None


def test_a_token_with_more_scopes_than_the_bound_is_refused(
    auth: Authenticator, rsa_key: rsa.RSAPrivateKey
) -> None:
    """Keeping only the first scopes would drop the rest, and a dropped scope could be
    the one a policy rule denies: the token is refused instead."""
    many = " ".join([*(f"f{i}" for i in range(64)), "w"])
    token = mint(rsa_key, alg="RS256", kid="rsa", payload=claims(scope=many))
    assert check(auth, token) is AuthFailure.REJECTED
    at_bound = " ".join([*(f"f{i}" for i in range(63)), "w"])
    accepted = check(auth, mint(rsa_key, alg="RS256", kid="rsa", payload=claims(scope=at_bound)))
    assert isinstance(accepted, Principal)
    assert "w" in accepted.scopes


def test_a_valid_token_names_its_subject_and_scopes(
    auth: Authenticator, rsa_key: rsa.RSAPrivateKey
) -> None:
    principal = check(
        auth, mint(rsa_key, alg="RS256", kid="rsa", payload=claims(scope="memory.read"))
    )
    assert isinstance(principal, Principal)
    assert principal.name == "oauth:alice"
    assert principal.scopes == {"memory.read"}

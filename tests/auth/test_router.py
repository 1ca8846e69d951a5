from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.auth import (
    ANONYMOUS,
    Authenticator,
    AuthFailure,
    Identity,
    Principal,
    offers_bearer_token,
)
from mymcp.auth._evidence import Evidence, extract_evidence
from mymcp.auth._router import OAuthChallenge, RoutedAdapter
from tests.auth.helpers import run


class Recorder:
    def __init__(self, outcome: object = Identity("alice", "operator:alice")) -> None:
        self.outcome = outcome
        self.payloads: list[str] = []

    async def authenticate(self, payload: str) -> object:
        self.payloads.append(payload)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def authenticator(adapter: Recorder, *, anonymous: bool = False, **kw: object) -> Authenticator:
    routed = RoutedAdapter("local-client", adapter)  # type: ignore[arg-type]
    return Authenticator(adapter=routed, anonymous_enabled=anonymous, **kw)  # type: ignore[arg-type]


# --- evidence extraction ---------------------------------------------------------------


def test_no_header_is_no_evidence() -> None:
    assert extract_evidence([]) is None
    assert extract_evidence(()) is None


def test_several_headers_are_malformed_even_if_identical() -> None:
    assert extract_evidence(["Bearer a", "Bearer a"]) is AuthFailure.MALFORMED


def test_bare_string_is_not_a_sequence_of_values() -> None:
    assert extract_evidence("Bearer abc") is AuthFailure.MALFORMED


@pytest.mark.parametrize(
    "value",
    [
        "",
        "Bearer",
        "Bearer ",
        " Bearer x",
        "Bearer  x",
        "Bearer x ",
        "Bearer\tx",
        "Bearer x y",
        "Bea(rer x",
        "Bearé x",
        "Bearer \ud800",
    ],
)
def test_malformed_values(value: str) -> None:
    assert extract_evidence([value]) is AuthFailure.MALFORMED


def test_scheme_is_lowercased_and_payload_kept_exactly() -> None:
    assert extract_evidence(["BeArEr AbC="]) == Evidence("bearer", "AbC=")


def test_payload_byte_bounds() -> None:
    assert extract_evidence(["Bearer " + "a" * 8192]) == Evidence("bearer", "a" * 8192)
    assert extract_evidence(["Bearer " + "a" * 8193]) is AuthFailure.MALFORMED
    assert extract_evidence(["Bearer " + "é" * 4097]) is AuthFailure.MALFORMED  # 8194 bytes


def test_kelvin_sign_is_not_folded_into_an_ascii_scheme() -> None:
    assert extract_evidence(["\u212aey x"]) is AuthFailure.MALFORMED


_TCHAR = st.sampled_from(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


@given(
    scheme=st.text(_TCHAR, min_size=1, max_size=20),
    payload=st.text(
        st.characters(exclude_categories=["Cs"], exclude_characters=" "),
        min_size=1,
        max_size=50,
    ),
)
def test_well_formed_values_round_trip(scheme: str, payload: str) -> None:
    assert extract_evidence([f"{scheme} {payload}"]) == Evidence(scheme.lower(), payload)


@given(st.text(max_size=40))
def test_any_single_value_yields_evidence_or_malformed(value: str) -> None:
    outcome = extract_evidence([value])
    if isinstance(outcome, Evidence):
        assert f"{outcome.scheme} {outcome.payload}".lower() == value.lower()
        assert value.count(" ") == 1
        assert outcome.scheme == outcome.scheme.lower()
    else:
        assert outcome is AuthFailure.MALFORMED


@given(st.lists(st.text(max_size=10), min_size=2, max_size=4))
def test_more_than_one_value_is_always_malformed(values: list[str]) -> None:
    assert extract_evidence(values) is AuthFailure.MALFORMED


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", " ", "\t "]),
            st.sampled_from(["Bearer", "bearer", "BEARER", "Basic", "DPoP", "Bearerx", "Bear"]),
            st.sampled_from(["", " ", "  x", "\tx", " a b", " tok"]),
        ),
        max_size=3,
    )
)
def test_a_bearer_token_is_offered_exactly_when_a_value_names_the_scheme(
    parts: list[tuple[str, str, str]],
) -> None:
    values = [lead + scheme + rest for lead, scheme, rest in parts]
    named = any(scheme.lower() == "bearer" for _, scheme, _ in parts)
    assert offers_bearer_token(values) is named


@given(st.text(max_size=12))
def test_no_non_ascii_scheme_offers_a_bearer_token(scheme: str) -> None:
    if not scheme.isascii():
        assert offers_bearer_token([f"{scheme} token"]) is False


# --- routing ----------------------------------------------------------------------------


def test_no_evidence_follows_anonymous_intent() -> None:
    assert run(authenticator(Recorder(), anonymous=True).authenticate([])) is ANONYMOUS
    assert run(authenticator(Recorder()).authenticate([])) is AuthFailure.NO_EVIDENCE


def test_registered_principal_from_adapter_subject() -> None:
    adapter = Recorder(Identity("alice", "oauth:alice", frozenset({"memory.read"})))
    principal = run(authenticator(adapter).authenticate(["Bearer tok"]))
    assert adapter.payloads == ["tok"]
    assert isinstance(principal, Principal)
    assert principal.principal_id == "registered:local-client:YWxpY2U"
    assert (principal.name, principal.scopes) == ("oauth:alice", frozenset({"memory.read"}))


def test_unknown_route_is_unsupported_and_never_anonymous() -> None:
    adapter = Recorder()
    auth = authenticator(adapter, anonymous=True)
    assert run(auth.authenticate(["Basic dXNlcg=="])) is AuthFailure.UNSUPPORTED
    assert adapter.payloads == []


@pytest.mark.parametrize("outcome", [AuthFailure.REJECTED, AuthFailure.MALFORMED])
def test_adapter_failure_is_final_even_with_anonymous(outcome: AuthFailure) -> None:
    auth = authenticator(Recorder(outcome), anonymous=True)
    assert run(auth.authenticate(["Bearer x"])) is outcome


def test_malformed_evidence_does_not_fall_back_to_anonymous() -> None:
    auth = authenticator(Recorder(), anonymous=True)
    assert run(auth.authenticate(["Bearer  x"])) is AuthFailure.MALFORMED


@pytest.mark.parametrize("outcome", [RuntimeError("boom"), ValueError("x"), KeyError("k")])
def test_adapter_exception_is_rejected(outcome: Exception) -> None:
    assert run(authenticator(Recorder(outcome)).authenticate(["Bearer x"])) is AuthFailure.REJECTED


@pytest.mark.parametrize(
    "outcome",
    ["alice", Identity("", "operator:"), Identity(" ", "x"), Identity("a\x00", "x"), None, 7],
)
def test_invalid_adapter_subject_is_rejected(outcome: object) -> None:
    assert run(authenticator(Recorder(outcome)).authenticate(["Bearer x"])) is AuthFailure.REJECTED


def test_authenticator_is_immutable() -> None:
    auth = authenticator(Recorder())
    with pytest.raises(AttributeError):
        auth._anonymous_enabled = True
    with pytest.raises(AttributeError):
        auth._adapter = None
    assert run(auth.authenticate(["Bearer x"])) == run(
        authenticator(Recorder()).authenticate(["Bearer x"])
    )


@pytest.mark.parametrize("failure", list(AuthFailure))
def test_operator_tokens_get_the_bare_bearer_challenge(failure: AuthFailure) -> None:
    # A 401 names the scheme it takes; without OAuth there is no metadata to point at.
    auth = authenticator(Recorder())
    for presented in (True, False):
        challenge = auth.challenge_headers(failure, token_presented=presented)
        assert challenge == {"WWW-Authenticate": "Bearer"}
    assert auth.protected_resource_metadata is None


def test_no_challenge_without_any_adapter() -> None:
    auth = Authenticator(adapter=None, anonymous_enabled=False)
    assert auth.challenge_headers(AuthFailure.NO_EVIDENCE, token_presented=False) == {}


def test_oauth_challenge_and_metadata() -> None:
    url = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
    challenge = OAuthChallenge(url, "http://127.0.0.1:8000/mcp", "https://idp.example.com")
    auth = authenticator(Recorder(), oauth=challenge)
    assert auth.challenge_headers(AuthFailure.NO_EVIDENCE, token_presented=False) == {
        "WWW-Authenticate": f'Bearer resource_metadata="{url}"'
    }
    assert auth.challenge_headers(AuthFailure.REJECTED, token_presented=True) == {
        "WWW-Authenticate": f'Bearer resource_metadata="{url}", error="invalid_token"'
    }
    body = auth.protected_resource_metadata
    assert body == {
        "resource": "http://127.0.0.1:8000/mcp",
        "authorization_servers": ["https://idp.example.com"],
        "bearer_methods_supported": ["header"],
    }
    body["resource"] = "tampered"
    assert auth.protected_resource_metadata["resource"] == "http://127.0.0.1:8000/mcp"  # type: ignore[index]


@pytest.mark.parametrize("failure", list(AuthFailure))
def test_only_a_bearer_credential_can_be_called_an_invalid_token(failure: AuthFailure) -> None:
    # No credential and a credential in a scheme we do not take both get the bare
    # challenge: there is no bearer token there to call invalid.
    url = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
    challenge = OAuthChallenge(url, "http://127.0.0.1:8000/mcp", "https://idp.example.com")
    auth = authenticator(Recorder(), oauth=challenge)
    bare = f'Bearer resource_metadata="{url}"'
    expected = bare
    if failure not in (AuthFailure.NO_EVIDENCE, AuthFailure.UNSUPPORTED):
        expected += ', error="invalid_token"'
    assert auth.challenge_headers(failure, token_presented=True) == {"WWW-Authenticate": expected}
    assert auth.challenge_headers(failure, token_presented=False) == {"WWW-Authenticate": bare}

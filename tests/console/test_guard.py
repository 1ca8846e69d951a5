"""Host, Origin, same-origin and CSRF rules, and the security headers on every response."""

from __future__ import annotations

import logging

import hypothesis.strategies as st
import pytest
from hypothesis import given

from mymcp.console.guard import is_same_origin_post, trusted_authority
from mymcp.logs import StderrLines
from mymcp.transport import TransportOptions
from tests.console.conftest import ORIGIN, Stack

BINDING = TransportOptions.for_binding("127.0.0.1", 8000)
EXPECTED_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


def _assert_secured(response: object) -> None:
    headers = response.headers  # type: ignore[attr-defined]
    for name, value in EXPECTED_HEADERS.items():
        assert headers.get_list(name) == [value], (response, name)


def _pending_approval(stack: Stack) -> str:
    reference = stack.remember("Target")
    session = stack.mcp_session()
    result = stack.mcp_call(
        session, "memory_archive", {"reference": reference, "expected_revision": 1}
    )
    url = result["structuredContent"]["approval_url"]
    return str(url).removeprefix("http://127.0.0.1:8000")


# -- pure rules -------------------------------------------------------------------------------


@given(st.sampled_from(sorted(BINDING.hosts)))
def test_a_same_origin_post_names_its_own_host(host: str) -> None:
    assert is_same_origin_post(host, [f"http://{host}"], [])
    assert is_same_origin_post(host, ["null"], ["same-origin"])
    assert not is_same_origin_post(host, [], ["same-origin"])
    assert not is_same_origin_post(host, ["null"], [])
    assert not is_same_origin_post(host, ["null"], ["same-site"])
    assert not is_same_origin_post(host, ["null"], ["same-origin", "same-origin"])
    assert not is_same_origin_post(host, [f"http://{host}", f"http://{host}"], [])
    assert not is_same_origin_post(host, [f"https://{host}"], [])


@given(
    st.sampled_from(sorted(BINDING.hosts)),
    st.sampled_from(sorted(BINDING.hosts)),
)
def test_another_loopback_authority_is_another_origin(host: str, other: str) -> None:
    assert is_same_origin_post(host, [f"http://{other}"], []) is (host == other)


@given(st.text(max_size=40), st.lists(st.text(max_size=40), max_size=2))
def test_only_the_servers_own_authority_is_trusted(host: str, origins: list[str]) -> None:
    trusted = trusted_authority([host], origins, BINDING.hosts, BINDING.origins)
    expected = host.lower() in BINDING.hosts and (
        not origins or (len(origins) == 1 and origins[0] in BINDING.origins)
    )
    assert trusted is expected


def test_a_request_needs_exactly_one_host() -> None:
    assert not trusted_authority([], [], BINDING.hosts, BINDING.origins)
    assert not trusted_authority(
        ["127.0.0.1:8000", "127.0.0.1:8000"], [], BINDING.hosts, BINDING.origins
    )


# -- through the server -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["evil.example:8000", "127.0.0.1:9999", "127.0.0.1", "attacker.localhost:8000"]
)
def test_a_foreign_host_is_refused_before_anything_else(stack: Stack, host: str) -> None:
    token_page = stack.client.get("/console/sign-in?token=x", headers={"host": host})
    assert token_page.status_code == 403
    assert "loopback" in token_page.text
    _assert_secured(token_page)


def test_a_foreign_origin_is_refused_even_for_reading(stack: Stack) -> None:
    stack.sign_in()
    for origin in ("http://evil.example", "http://127.0.0.1:9999", "null"):
        response = stack.client.get("/console/approvals", headers={"origin": origin})
        assert response.status_code == 403
        _assert_secured(response)
    assert stack.client.get("/console/approvals", headers=ORIGIN).status_code == 200


def test_a_post_without_or_with_a_wrong_csrf_token_is_refused(stack: Stack) -> None:
    csrf = stack.sign_in()
    path = _pending_approval(stack)
    for form in (
        {"decision": "approve"},
        {"decision": "approve", "csrf": ""},
        {"decision": "approve", "csrf": csrf[:-1]},
        {"decision": "approve", "csrf": csrf + "x"},
    ):
        response = stack.post(path, form)
        assert response.status_code == 403, form
        assert "CSRF" in response.text
    assert "Waiting for your decision" in stack.client.get(path).text


def test_a_refused_post_logs_its_route_never_the_path_it_was_sent_to(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    stack.sign_in()
    caplog.set_level(logging.DEBUG, logger="mymcp.console")
    hostile = {  # an escape sequence that retitles a terminal and clears its screen
        "/console/approvals/x%1b%5d0%3bTITLE%07%1b%5b2J": "approval",
        "/console/memory/record/archive%1b%5b2J%1b%5b1Aconsole%20outcome=ok": "memory_change",
        "/console/sign-out": "sign_out",
    }
    for path in hostile:
        response = stack.post(path, {"csrf": "bad", "decision": "approve"})
        assert response.status_code == 403, path
    refusals = [r for r in caplog.records if r.name == "mymcp.console"]
    assert [r.getMessage() for r in refusals] == [
        f"console csrf_refused route={route}" for route in hostile.values()
    ]
    for record in refusals:  # the line an operator reads, in the text format
        line = StderrLines().line(record)
        assert line.endswith("\n")
        assert line[:-1].isprintable(), line
        assert "TITLE" not in line
        assert "outcome=ok" not in line


def test_a_failure_logs_only_a_plain_exception_name(
    stack: Stack, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    forged = type("Forged\n2026-01-01T00:00:00.000Z INFO mcp \x1b[2J", (RuntimeError,), {})

    def fail(pending: object) -> object:
        raise forged("memory content")

    stack.sign_in()
    monkeypatch.setattr("mymcp.console.pages.pending_summary", fail)
    caplog.set_level(logging.DEBUG, logger="mymcp.console")
    response = stack.client.get("/console/approvals")
    assert response.status_code == 500
    _assert_secured(response)
    assert [r.getMessage() for r in caplog.records if r.name == "mymcp.console"] == [
        "console failure error_type=<unnamed>"
    ]


def test_another_sessions_csrf_token_is_refused(stack: Stack) -> None:
    stack.sign_in()
    path = _pending_approval(stack)
    with stack.another_browser() as other:
        foreign = stack.sign_in(other)
    response = stack.post(path, {"decision": "approve", "csrf": foreign})
    assert response.status_code == 403
    assert "Waiting for your decision" in stack.client.get(path).text


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"origin": "http://evil.example"},
        {"origin": "http://localhost:8000"},  # loopback, but not this page's origin
        {"origin": "null"},
        {"origin": "null", "sec-fetch-site": "cross-site"},
        {"origin": "http://127.0.0.1:8000", "host": "evil.example:8000"},
    ],
)
def test_a_post_from_another_origin_is_refused(stack: Stack, headers: dict[str, str]) -> None:
    csrf = stack.sign_in()
    path = _pending_approval(stack)
    response = stack.post(path, {"decision": "approve", "csrf": csrf}, headers=headers)
    assert response.status_code == 403
    _assert_secured(response)
    assert "Waiting for your decision" in stack.client.get(path).text


def test_a_form_post_from_the_consoles_own_page_is_accepted(stack: Stack) -> None:
    csrf = stack.sign_in()
    path = _pending_approval(stack)
    # What a browser sends for a form on a page whose referrer policy is no-referrer.
    headers = {"origin": "null", "sec-fetch-site": "same-origin"}
    response = stack.post(path, {"decision": "deny", "csrf": csrf}, headers=headers)
    assert response.status_code == 303
    assert "Denied" in stack.client.get(path).text


def test_a_malformed_form_is_refused(stack: Stack) -> None:
    csrf = stack.sign_in()
    path = _pending_approval(stack)
    body = f"csrf={csrf}&decision=approve"
    cases = [
        ({"content-type": "application/json"}, body),
        ({"content-type": "application/x-www-form-urlencoded"}, body + "&decision=deny"),
        ({"content-type": "application/x-www-form-urlencoded"}, body + "&x=" + "a" * 20000),
    ]
    for headers, content in cases:
        response = stack.client.post(path, content=content, headers={**ORIGIN, **headers})
        assert response.status_code == 400
    assert "Waiting for your decision" in stack.client.get(path).text


def test_every_response_carries_the_security_headers(stack: Stack) -> None:
    reference = stack.remember("Headers")
    record = (
        "/console/memory/record?scope=project&namespace=mnemosyne&collection=decisions"
        f"&id={reference['id']}"
    )
    signed_out = [
        "/console",
        "/console/",
        "/console/approvals",
        "/console/approvals.json",
        "/console/sign-in?token=nope",
        "/console/static/console.css",
        "/console/static/console.js",
        "/console/static/missing.js",
        "/console/no-such-page",
    ]
    for path in signed_out:
        _assert_secured(stack.client.get(path, follow_redirects=False))
    csrf = stack.sign_in()
    approval = _pending_approval(stack)
    signed_in = [
        *signed_out,
        approval,
        "/console/approvals/unknown",
        "/console/memory",
        "/console/memory/project",
        "/console/memory/project/mnemosyne",
        "/console/memory/project/mnemosyne/decisions",
        "/console/memory/project/mnemosyne/-",
        "/console/memory/nowhere",
        "/console/memory/search?scope=project&q=headers",
        record,
        record.replace("/record?", "/record/archive?"),
        "/console/audit?event=tool_call",
    ]
    for path in signed_in:
        response = stack.client.get(path, follow_redirects=False)
        assert response.status_code < 500, path
        _assert_secured(response)
    for path, form in [
        (approval, {"decision": "approve", "csrf": csrf}),
        (approval, {"decision": "approve"}),
        ("/console/memory/record/archive", {"csrf": csrf}),
        ("/console/sign-out", {"csrf": csrf}),
    ]:
        _assert_secured(stack.post(path, form))
    _assert_secured(stack.client.delete("/console/approvals"))


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/console/sign-out", "POST"),
        ("POST", "/console/memory", "GET, HEAD"),
        ("PUT", "/console/approvals", "GET, HEAD"),
        ("DELETE", "/console/approvals", "GET, HEAD"),
        ("PATCH", "/console/memory/record", "GET, HEAD"),
        # A page and the form it posts: both methods are named.
        ("OPTIONS", "/console/approvals/some-id", "GET, HEAD, POST"),
        ("PUT", "/console/memory/record/archive", "GET, HEAD, POST"),
    ],
)
def test_a_method_a_page_does_not_take_is_answered_405_quietly(
    stack: Stack, caplog: pytest.LogCaptureFixture, method: str, path: str, allow: str
) -> None:
    csrf = stack.sign_in()
    caplog.set_level(logging.DEBUG, logger="mymcp.console")
    caplog.clear()
    response = stack.client.request(
        method, path, data={"csrf": csrf}, headers=ORIGIN, follow_redirects=False
    )
    assert response.status_code == 405
    assert set(response.headers["allow"].split(", ")) == set(allow.split(", "))
    assert "405 Method Not Allowed" in response.text
    _assert_secured(response)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert stack.client.get("/console/approvals").status_code == 200  # still signed in


def test_static_files_have_their_types_and_no_inline_code_exists(stack: Stack) -> None:
    css = stack.client.get("/console/static/console.css")
    js = stack.client.get("/console/static/console.js")
    assert css.headers["content-type"] == "text/css; charset=utf-8"
    assert js.headers["content-type"] == "text/javascript; charset=utf-8"
    stack.sign_in()
    page = stack.client.get("/console/approvals").text
    assert "<script>" not in page
    assert "<style" not in page
    assert " style=" not in page
    assert '<script src="/console/static/console.js" defer></script>' in page
    assert "innerHTML" not in js.text

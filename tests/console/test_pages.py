"""The console's pages in-process: approvals, the memory browser, its actions, the audit."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import hypothesis.strategies as st
import pytest
from hypothesis import example, given
from markupsafe import escape

from mymcp.console.approvals import pending_summary, visible
from mymcp.console.audit import DEFAULT_LIMIT, MAX_LIMIT, AuditFilter, AuditView
from mymcp.console.memory import Outcome, reference_from_query, reference_query
from mymcp.governance import Approvals, AuditLog, read_records, rfc3339
from tests.console.conftest import GATES, Stack, remember_arguments, running

XSS_TITLE = "<script>alert(1)</script>"
XSS_CONTENT = '<img src=x onerror="alert(2)"> & </pre><b>bold</b>'
XSS_TAG = "<svg onload=alert(3)>"
XSS_NAMESPACE_LABEL = "<b>namespace</b><script>alert(4)</script>"
XSS_COLLECTION_LABEL = "\"'><iframe src=javascript:alert(5)>"


def _approval_path(result: dict[str, Any]) -> str:
    payload = result["structuredContent"]
    assert payload["status"] == "approval_required", payload
    return str(payload["approval_url"]).removeprefix("http://127.0.0.1:8000")


def _status(result: dict[str, Any]) -> str:
    return str(result["structuredContent"]["status"])


def _record_path(reference: dict[str, Any]) -> str:
    collection = reference["collection_id"]
    query = f"scope={reference['scope']}&namespace={reference['namespace_id']}"
    if collection is not None:
        query += f"&collection={collection}"
    return f"/console/memory/record?{query}&id={reference['id']}"


def _text(page: str) -> str:
    """The page's visible text, roughly: tags dropped, entities decoded, spaces folded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _compared(page: str) -> dict[str, tuple[bool, list[str]]]:
    """The revision comparison: per field, whether it is marked changed, and its cells."""
    return {
        _text(match.group(1)).removesuffix(" changed"): (
            "changed" in match.group(0),
            [_text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", match.group(0), re.S)],
        )
        for match in re.finditer(r"<tr[^>]*>\s*<th scope=\"row\">(.*?)</th>.*?</tr>", page, re.S)
    }


def _revision(reference: dict[str, Any], stored_title: str, **changes: Any) -> dict[str, Any]:
    """`memory_revise` arguments that keep what `remember_arguments(stored_title)` stored,
    except `changes`."""
    stored = remember_arguments(stored_title)
    return {
        "reference": reference,
        "expected_revision": 1,
        "namespace_label": stored["namespace"]["label"],
        "collection_label": stored["collection"]["label"],
        "title": stored_title,
        "content": stored["content"],
        "tags": stored["tags"],
        **changes,
    }


def _console_calls(stack: Stack) -> list[tuple[str, str]]:
    audit = stack.host.governance.audit
    assert audit is not None
    audit.commit()
    return [
        (str(record["tool"]), str(record["outcome"]))
        for record in read_records(audit.directory)
        if record.get("principal") == "console" and "outcome" in record
    ]


# -- approvals ------------------------------------------------------------------------------


def test_an_approved_call_runs_exactly_once_when_the_client_repeats_it(stack: Stack) -> None:
    csrf = stack.sign_in()
    reference = stack.remember("Archive me")
    session = stack.mcp_session()
    arguments = {"reference": reference, "expected_revision": 1}
    path = _approval_path(stack.mcp_call(session, "memory_archive", arguments))
    approval_id = path.rsplit("/", 1)[1]

    feed = stack.client.get("/console/approvals.json").json()
    assert [item["id"] for item in feed["pending"]] == [approval_id]
    assert feed["pending"][0]["tool"] == "memory_archive"
    listing = stack.client.get("/console/approvals").text
    assert f'href="/console/approvals/{approval_id}"' in listing

    detail = stack.client.get(path)
    text = _text(detail.text)
    assert "Waiting for your decision" in text
    assert "Requested by anonymous" in text
    assert "The record this call targets" in text
    assert "Archive me" in text
    # The record on a decision page is laid out in stored order, as the arguments are;
    # its content heading sits one level below the section's.
    assert '<dd class="title exact">Archive me</dd>' in detail.text
    assert '<pre class="content exact">' in detail.text
    assert '<h3 class="content-heading">Content</h3>' in detail.text
    record_page = stack.client.get(_record_path(reference))
    assert '<h2 class="content-heading">Content</h2>' in record_page.text
    assert "exact" not in record_page.text.split('<dl class="fields">')[1]
    assert f'"id": "{reference["id"]}"' in html.unescape(detail.text)
    assert '"expected_revision": 1' in html.unescape(detail.text)

    decided = stack.post(path, {"decision": "approve", "csrf": csrf})
    assert (decided.status_code, decided.headers["location"]) == (303, path)
    assert "Approved. The client may now repeat" in stack.client.get(path).text
    assert stack.client.get("/console/approvals.json").json()["pending"] == []

    assert _status(stack.mcp_call(session, "memory_archive", arguments)) == "archived"
    assert "Approved and used" in stack.client.get(path).text
    again = stack.mcp_call(session, "memory_archive", arguments)
    assert _approval_path(again) != path  # a second run needs a second approval


def test_a_denied_call_is_refused_when_the_client_repeats_it(stack: Stack) -> None:
    csrf = stack.sign_in()
    reference = stack.remember("Keep me")
    session = stack.mcp_session()
    arguments = {"reference": reference, "expected_revision": 1}
    path = _approval_path(stack.mcp_call(session, "memory_archive", arguments))
    assert stack.post(path, {"decision": "deny", "csrf": csrf}).status_code == 303
    assert "Denied" in stack.client.get(path).text
    assert _status(stack.mcp_call(session, "memory_archive", arguments)) == "approval_denied"
    inspected = stack.run("memory_inspect", {"reference": reference})
    assert inspected["memory"]["lifecycle"]["state"] == "active"


def test_a_decision_cannot_be_made_twice_or_after_expiry(stack: Stack) -> None:
    csrf = stack.sign_in()
    session = stack.mcp_session()
    first = _approval_path(stack.mcp_call(session, "memory_remember", remember_arguments("first")))
    assert stack.post(first, {"decision": "deny", "csrf": csrf}).status_code == 303
    twice = stack.post(first, {"decision": "approve", "csrf": csrf})
    assert twice.status_code == 409
    assert "already decided" in twice.text
    assert "Denied" in twice.text

    late = _approval_path(stack.mcp_call(session, "memory_remember", remember_arguments("late")))
    stack.clock.now += 301
    expired = stack.post(late, {"decision": "approve", "csrf": csrf})
    assert expired.status_code == 409
    assert "expired before your decision" in expired.text

    unknown = stack.post("/console/approvals/nope", {"decision": "approve", "csrf": csrf})
    assert unknown.status_code == 404
    bad = stack.post(first, {"decision": "maybe", "csrf": csrf})
    assert bad.status_code == 400


def _times(page: str) -> dict[str, str]:
    """The approval page's timeline: label to time."""
    fields = re.search(r'<dl class="fields">(.*?)</dl>', page, re.S)
    assert fields is not None
    pairs = re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", fields.group(1))
    return {label: moment for label, moment in pairs if label.endswith((" at", " until"))}


def test_the_approval_page_labels_its_times_by_state(stack: Stack) -> None:
    csrf = stack.sign_in()
    session = stack.mcp_session()
    start = stack.clock.now
    at = rfc3339
    arguments = remember_arguments("timeline")
    path = _approval_path(stack.mcp_call(session, "memory_remember", arguments))
    assert _times(stack.client.get(path).text) == {
        "Requested at": at(start),
        "Expires at": at(start + 300),
    }
    stack.clock.now += 10
    stack.post(path, {"decision": "approve", "csrf": csrf})
    assert _times(stack.client.get(path).text) == {
        "Requested at": at(start),
        "Approved at": at(start + 10),
        "Valid until": at(start + 310),
    }
    stack.clock.now += 5
    assert _status(stack.mcp_call(session, "memory_remember", arguments)) == "remembered"
    assert _times(stack.client.get(path).text) == {
        "Requested at": at(start),
        "Approved at": at(start + 10),
        "Used at": at(start + 15),
    }

    denied = _approval_path(stack.mcp_call(session, "memory_remember", remember_arguments("no")))
    stack.clock.now += 20
    stack.post(denied, {"decision": "deny", "csrf": csrf})
    assert _times(stack.client.get(denied).text) == {
        "Requested at": at(start + 15),
        "Denied at": at(start + 35),
    }

    late = _approval_path(stack.mcp_call(session, "memory_remember", remember_arguments("late")))
    stack.clock.now += 1000
    assert _times(stack.client.get(late).text) == {
        "Requested at": at(start + 35),
        "Expired at": at(start + 335),
    }


def test_the_live_feed_changes_version_with_every_new_request(stack: Stack) -> None:
    stack.sign_in()
    before = stack.client.get("/console/approvals.json").json()
    assert before["enabled"] is True
    assert before["pending"] == []
    session = stack.mcp_session()
    for title in ("one", "two"):
        stack.mcp_call(session, "memory_remember", remember_arguments(title))
    after = stack.client.get("/console/approvals.json").json()
    assert after["version"] != before["version"]
    assert [item["tool"] for item in after["pending"]] == ["memory_remember"] * 2
    assert set(after["pending"][0]) == {
        "id",
        "tool",
        "principal",
        "created_at",
        "expires_at",
        "client_declined",
        "principal_beyond_ascii",
    }
    assert after["pending"][0]["client_declined"] is False
    assert after["pending"][0]["principal_beyond_ascii"] is False
    page = stack.client.get("/console/approvals").text
    assert f'data-version="{after["version"]}"' in page


def test_an_approval_its_client_declined_says_so_where_it_is_decided(stack: Stack) -> None:
    stack.sign_in()
    session = stack.mcp_session()
    path = _approval_path(stack.mcp_call(session, "memory_remember", remember_arguments("x")))
    assert "declined" not in _text(stack.client.get(path).text)
    approvals = stack.host.governance.approvals
    assert approvals is not None
    (pending,) = approvals.pending()
    # What the stateless era's retry does when the client's user declined the link.
    approvals.check(
        principal=pending.principal,
        principal_id=pending.principal_id,
        session_id=pending.session_id,
        tool=pending.tool,
        arguments=pending.arguments,
        args_digest=pending.args_digest,
        spend=False,
    )
    page = _text(stack.client.get(path).text)
    assert "that its user declined to open this page: they may not want this call" in page
    assert "the client declined to open it" in _text(stack.client.get("/console/approvals").text)
    (item,) = stack.client.get("/console/approvals.json").json()["pending"]
    assert item["client_declined"] is True


def test_a_principal_with_characters_beyond_ascii_is_named_where_it_is_decided(
    stack: Stack,
) -> None:
    stack.sign_in()
    approvals = stack.host.governance.approvals
    assert approvals is not None

    def requested_by(principal: str, principal_id: str) -> Any:
        return approvals.check(
            principal=principal,
            principal_id=principal_id,
            session_id="s",
            tool="memory_remember",
            arguments=remember_arguments("x"),
            args_digest=None,
        ).approval

    plain = requested_by("operator:alice", "o-1")
    # A Cyrillic a (U+0430) in place of the Latin one: drawn alike.
    lookalike = requested_by("operator:\u0430lice", "o-2")
    assert plain is not None
    assert lookalike is not None
    assert "beyond ASCII" not in _text(stack.client.get(f"/console/approvals/{plain.id}").text)
    page = _text(stack.client.get(f"/console/approvals/{lookalike.id}").text)
    assert (
        "This principal's name has characters beyond ASCII, which can look like others: "
        "U+0430 CYRILLIC SMALL LETTER A. Make sure it is who you expect."
    ) in page
    listed = _text(stack.client.get("/console/approvals").text)
    assert listed.count("name beyond ASCII") == 1
    feed = stack.client.get("/console/approvals.json").json()["pending"]
    assert {item["id"]: item["principal_beyond_ascii"] for item in feed} == {
        plain.id: False,
        lookalike.id: True,
    }


def test_a_change_in_spacing_alone_is_named_as_such(stack: Stack) -> None:
    stack.sign_in()
    reference = stack.remember("Spaced")
    stored = remember_arguments("Spaced")["content"]
    session = stack.mcp_session()
    proposal = _revision(reference, "Spaced", content=stored + " ")
    page = stack.client.get(_approval_path(stack.mcp_call(session, "memory_revise", proposal)))
    rows = _compared(page.text)
    # The cells look alike, so the badge says what kind of change it is; only there.
    assert rows["Content changed: only spaces, tabs or line ends"][0] is True
    assert rows["Title"] == (False, ["Spaced", "Spaced"])
    assert page.text.count("only spaces, tabs or line ends") == 1


def test_a_revision_is_shown_beside_the_stored_record(stack: Stack) -> None:
    stack.sign_in()
    reference = stack.remember("Old title", tags=["keep"])
    session = stack.mcp_session()
    proposal = _revision(reference, "Old title", title="New title", tags=["keep", "added"])
    path = _approval_path(stack.mcp_call(session, "memory_revise", proposal))
    page = stack.client.get(path).text
    rows = _compared(page)
    assert rows["Title"] == (True, ["Old title", "New title"])
    assert rows["Tags"] == (True, ['["keep"]', '["keep", "added"]'])
    assert rows["Content"] == (False, ["The content of Old title"] * 2)
    assert rows["Namespace label"] == (False, ["Mnemosyne", "Mnemosyne"])
    assert "revision_conflict" not in page

    stale = _approval_path(
        stack.mcp_call(session, "memory_revise", {**proposal, "expected_revision": 7})
    )
    assert "expects revision 7, but the record is at revision 1" in stack.client.get(stale).text


def test_revised_tags_are_compared_as_json_lists_shown_visibly(stack: Stack) -> None:
    stack.sign_in()
    reference = stack.remember("Tagged", tags=["a", "b"])
    session = stack.mcp_session()
    proposal = _revision(reference, "Tagged")
    joined = _approval_path(
        stack.mcp_call(session, "memory_revise", {**proposal, "tags": ["a, b"]})
    )
    rows = _compared(stack.client.get(joined).text)
    assert rows["Tags"] == (True, ['["a", "b"]', '["a, b"]'])

    sneaky = _approval_path(
        stack.mcp_call(session, "memory_revise", {**proposal, "tags": ["a", "b\u202egnp"]})
    )
    page = stack.client.get(sneaky).text
    assert "\u202e" not in page
    assert _compared(page)["Tags"] == (True, ['["a", "b"]', '["a", "b\\u202egnp"]'])


def test_invisible_characters_in_arguments_are_shown(stack: Stack) -> None:
    stack.sign_in()
    session = stack.mcp_session()
    sneaky = "evil\u202egnp.exe\u200b"
    path = _approval_path(stack.mcp_call(session, "memory_remember", remember_arguments(sneaky)))
    page = stack.client.get(path).text
    assert "\u202e" not in page
    assert "\u200b" not in page
    assert "evil\\u202egnp.exe\\u200b" in page
    assert visible("line\nnext\ttab\u2028") == "line\nnext\ttab\\u2028"


def test_without_approval_settings_the_console_says_so(tmp_path: Path) -> None:
    config = '[server]\naddress = "127.0.0.1"\nport = 8000\n'
    with running(tmp_path, config="schema_version = 8\n" + config) as stack:
        stack.sign_in()
        assert "selects none" in stack.client.get("/console/approvals").text
        assert stack.client.get("/console/approvals.json").json() == {
            "enabled": False,
            "version": 0,
            "pending": [],
        }
        assert stack.client.get("/console/approvals/abc").status_code == 404


# -- memory -----------------------------------------------------------------------------------


def test_scope_namespace_collection_record(stack: Stack) -> None:
    stack.remember("In decisions")
    stack.remember("Loose", collection=None)
    stack.remember("Garden bed", namespace={"kind": "project", "id": "garden", "label": "G"})
    stack.sign_in()
    home = stack.client.get("/console/memory").text
    assert 'href="/console/memory/project"' in home
    assert 'name="namespace" value=""' in home
    scope = stack.client.get("/console/memory/project").text
    assert 'href="/console/memory/project/garden"' in scope
    assert 'href="/console/memory/project/mnemosyne"' in scope
    assert "3 records" in _text(scope)
    namespace = stack.client.get("/console/memory/project/mnemosyne").text
    assert 'href="/console/memory/project/mnemosyne/decisions"' in namespace
    assert 'href="/console/memory/project/mnemosyne/-"' in namespace
    assert "Garden bed" not in namespace
    collection = stack.client.get("/console/memory/project/mnemosyne/decisions").text
    assert "In decisions" in collection
    assert "Loose" not in collection
    outside = stack.client.get("/console/memory/project/mnemosyne/-").text
    assert "Loose" in outside
    assert "In decisions" not in outside

    link = re.search(r'href="(/console/memory/record\?[^"]+)">In decisions<', collection)
    assert link is not None
    record = stack.client.get(html.unescape(link.group(1)))
    text = _text(record.text)
    for expected in (
        "Title In decisions",
        "Status active",
        "Revision 1",
        "Namespace mnemosyne (Mnemosyne)",
        "Collection decisions (Decisions)",
        "Tags console",
        "The content of In decisions",
        "Created 20",
        "Updated 20",
    ):
        assert expected in text, expected


@given(
    scope=st.text(min_size=1, max_size=20),
    namespace=st.text(min_size=1, max_size=70),
    collection=st.none() | st.text(min_size=1, max_size=70),
    memory_id=st.text(min_size=1, max_size=40),
)
def test_record_urls_name_exactly_their_record(
    scope: str, namespace: str, collection: str | None, memory_id: str
) -> None:
    canonical = {
        "schema_version": 2,
        "scope": scope,
        "namespace_id": namespace,
        "collection_id": collection,
        "id": memory_id,
    }
    legacy = {"schema_version": 1, "scope": scope, "id": memory_id}
    for reference in (canonical, legacy):
        query = dict(parse_qsl(reference_query(reference), keep_blank_values=True))
        assert reference_from_query(query) == reference


def test_listings_are_paginated(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mymcp.console.memory.PAGE_SIZE", 2)
    monkeypatch.setattr("mymcp.console.memory.CONTAINER_PAGE_SIZE", 2)
    titles = {f"Note {n}" for n in range(5)}
    for title in sorted(titles):
        stack.remember(title)
    stack.sign_in()
    seen: list[str] = []
    path = "/console/memory/project/mnemosyne/decisions"
    pages = 0
    while True:
        page = stack.client.get(path).text
        pages += 1
        seen += re.findall(r">(Note \d)</a>", page)
        following = re.search(r'href="(\?cursor=[^"]+)" rel="next"', page)
        if following is None:
            break
        path = "/console/memory/project/mnemosyne/decisions" + html.unescape(following.group(1))
    assert pages == 3
    assert sorted(seen) == sorted(titles)
    scope = _text(stack.client.get("/console/memory/project").text)
    assert "mnemosyne 5 records" in scope  # the namespace walk crossed three pages
    broken = stack.client.get("/console/memory/project/mnemosyne/decisions?cursor=forged")
    assert broken.status_code == 400  # a cursor the server never gave is malformed
    assert "invalid_cursor" in broken.text


def test_search_runs_recall(stack: Stack) -> None:
    stack.remember("Tomatoes", content="Tomatoes want full sun and deep watering.")
    stack.remember("Cellar", content="The cellar stays cool all year.")
    stack.sign_in()
    found = stack.client.get("/console/memory/search?scope=project&q=watering+tomatoes")
    assert 'value="watering tomatoes"' in found.text
    assert '<option value="project" selected>' in found.text
    text = _text(found.text)
    assert "Tomatoes want full sun" in text
    assert "cellar stays cool" not in text
    nothing = stack.client.get("/console/memory/search?scope=project&q=zeppelin")
    assert "Nothing relevant was found" in nothing.text
    invalid = stack.client.get("/console/memory/search?scope=moon&q=x")
    assert invalid.status_code == 400
    assert "invalid_scope" in invalid.text


def test_archive_restore_and_forget_with_a_confirmation_step(stack: Stack) -> None:
    csrf = stack.sign_in()
    reference = stack.remember("Short-lived")
    record = _record_path(reference)
    page = stack.client.get(record).text
    archive_link = f'href="/console/memory/record/archive?{record.split("?", 1)[1]}"'
    assert html.unescape(page).count(archive_link.replace("&amp;", "&")) == 1
    assert "/record/forget?" not in page  # an active record is archived first
    # Nor does a typed (or stale) forget link ask to confirm a step its state lacks.
    typed = stack.client.get(record.replace("/record?", "/record/forget?"))
    assert typed.status_code == 409
    assert "Forget does not apply to a record that is active." in typed.text
    assert "Forget this record" not in typed.text
    assert html.unescape(typed.text).count(archive_link.replace("&amp;", "&")) == 1

    confirm = stack.client.get(record.replace("/record?", "/record/archive?"))
    assert "Archive this record?" in confirm.text
    assert 'name="expected_revision" value="1"' in confirm.text
    form = {
        "csrf": csrf,
        "scope": "project",
        "namespace": "mnemosyne",
        "collection": "decisions",
        "id": reference["id"],
        "expected_revision": "1",
    }
    archived = stack.post("/console/memory/record/archive", form)
    assert archived.status_code == 303
    assert archived.headers["location"].endswith("&done=archived")
    page = stack.client.get(archived.headers["location"]).text
    assert "Archived: the record is kept" in page
    assert "Status archived" in _text(page)
    assert "/record/restore?" in page
    assert "/record/forget?" in page

    # Digits `str.isdigit` admits but `int` refuses are an incomplete form, not a failure.
    for odd in ("\u00b2", "\u2460", "\u0661", "-1", "1" * 13):
        refused = stack.post("/console/memory/record/forget", {**form, "expected_revision": odd})
        assert refused.status_code == 400, odd
        assert "The form is incomplete" in refused.text

    conflict = stack.post("/console/memory/record/forget", form)  # revision is 2 now
    assert conflict.status_code == 409
    assert "revision_conflict" in conflict.text

    confirm = stack.client.get(record.replace("/record?", "/record/forget?"))
    assert "This cannot be undone" in confirm.text
    forgotten = stack.post("/console/memory/record/forget", {**form, "expected_revision": "2"})
    assert forgotten.headers["location"] == (
        "/console/memory/project/mnemosyne/decisions?done=forgotten"
    )
    assert (
        "Forgotten: the record was deleted" in stack.client.get(forgotten.headers["location"]).text
    )
    gone = stack.client.get(record)
    assert gone.status_code == 404
    assert "not_found" in gone.text
    again = stack.post("/console/memory/record/forget", {**form, "expected_revision": "2"})
    assert again.status_code == 404  # nothing is left to forget: not a conflict
    assert "not_found" in again.text
    assert stack.run("memory_inspect", {"reference": reference})["status"] == "not_found"
    calls = _console_calls(stack)
    assert ("memory_archive", "ok") in calls
    assert ("memory_forget", "revision_conflict") in calls
    assert ("memory_forget", "ok") in calls


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/console/memory/knowledge/BAD_NS", "invalid_namespace"),
        ("/console/memory/search?q=%00&scope=project", "invalid_query"),
        ("/console/memory/search?q=x&scope=bogus", "invalid_scope"),
        ("/console/memory/search?q=x&scope=project&namespace=BAD_NS", "invalid_namespace"),
        ("/console/memory/project/mnemosyne/BAD_COLLECTION", "invalid_collection"),
        ("/console/memory/record?scope=bogus&id=x", "invalid_reference"),
        ("/console/memory/record?scope=project&namespace=BAD_NS&id=x", "invalid_reference"),
        ("/console/memory/record/archive?scope=project&namespace=BAD_NS&id=x", "invalid_reference"),
    ],
)
def test_malformed_input_is_a_bad_request_not_a_conflict(
    stack: Stack, path: str, code: str
) -> None:
    stack.remember("Present")
    stack.sign_in()
    response = stack.client.get(path)
    assert response.status_code == 400, response.text
    assert code in response.text  # the tool's code, as before: no more of the input


def test_a_malformed_reference_in_a_form_is_a_bad_request(stack: Stack) -> None:
    csrf = stack.sign_in()
    reference = stack.remember("Kept")
    form = {"csrf": csrf, "scope": "project", "namespace": "BAD_NS", "collection": "decisions"}
    form |= {"id": reference["id"], "expected_revision": "1"}
    refused = stack.post("/console/memory/record/archive", form)
    assert refused.status_code == 400
    assert "invalid_reference" in refused.text
    assert (
        stack.run("memory_inspect", {"reference": reference})["memory"]["lifecycle"]["state"]
        == "active"
    )


def test_switched_off_tools_have_no_buttons(tmp_path: Path) -> None:
    gates = {"MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "true"}
    with running(tmp_path, gates=gates) as stack:
        csrf = stack.sign_in()
        reference = stack.remember("Stays")
        record = _record_path(reference)
        page = stack.client.get(record).text
        assert "Status active" in _text(page)
        assert "/record/archive?" not in page
        assert stack.client.get(record.replace("/record?", "/record/archive?")).status_code == 404
        form = {"csrf": csrf, "scope": "project", "namespace": "mnemosyne"}
        form |= {"collection": "decisions", "id": reference["id"], "expected_revision": "1"}
        refused = stack.post("/console/memory/record/archive", form)
        assert refused.status_code == 409
        assert "tool_unavailable" in refused.text


def test_memory_content_is_escaped_everywhere(stack: Stack) -> None:
    assert set(GATES) <= set(stack.env)
    reference = stack.remember(
        XSS_TITLE,
        content=XSS_CONTENT,
        namespace={"kind": "project", "id": "xss", "label": XSS_NAMESPACE_LABEL},
        collection={"id": "xsscol", "label": XSS_COLLECTION_LABEL},
        tags=[XSS_TAG],
    )
    stack.sign_in()
    session = stack.mcp_session()
    proposal = {
        "reference": reference,
        "expected_revision": 1,
        "namespace_label": XSS_NAMESPACE_LABEL + " v2",
        "collection_label": XSS_COLLECTION_LABEL + " v2",
        "title": XSS_TITLE + " v2",
        "content": XSS_CONTENT,
        "tags": [XSS_TAG, XSS_TAG + " v2"],
    }
    approval = _approval_path(stack.mcp_call(session, "memory_revise", proposal))
    everything = [XSS_TITLE, XSS_CONTENT, XSS_TAG, XSS_NAMESPACE_LABEL, XSS_COLLECTION_LABEL]
    pages = {
        "/console/memory/project": [],
        "/console/memory/project/xss/xsscol": [XSS_TITLE],
        _record_path(reference): everything,
        _record_path(reference).replace("/record?", "/record/archive?"): everything,
        "/console/memory/search?scope=project&q=alert+bold": [XSS_TITLE, XSS_CONTENT, XSS_TAG],
        approval: everything,
    }
    for path, shown in pages.items():
        page = stack.client.get(path).text
        for raw in ("<script>alert", "<img src=x", "<b>bold", "<svg", "<b>namespace", "<iframe"):
            assert raw not in page, (path, raw)
        assert page.count("<script") == 1, path  # the console's own, from /static/
        for value in shown:
            assert str(escape(value)) in page, (path, value)
    record = _text(stack.client.get(_record_path(reference)).text)
    assert XSS_TITLE in record
    assert f"Namespace xss ({XSS_NAMESPACE_LABEL})" in record
    assert f"Collection xsscol ({XSS_COLLECTION_LABEL})" in record
    assert _compared(stack.client.get(approval).text) == {
        "Namespace label": (True, [XSS_NAMESPACE_LABEL, XSS_NAMESPACE_LABEL + " v2"]),
        "Collection label": (True, [XSS_COLLECTION_LABEL, XSS_COLLECTION_LABEL + " v2"]),
        "Title": (True, [XSS_TITLE, XSS_TITLE + " v2"]),
        "Content": (False, [XSS_CONTENT, XSS_CONTENT]),
        "Tags": (True, [f'["{XSS_TAG}"]', f'["{XSS_TAG}", "{XSS_TAG} v2"]']),
    }


def test_a_record_page_names_its_title_and_an_event_s_time_as_they_are(stack: Stack) -> None:
    stack.sign_in()
    title = "invoice\u202efdp.exe"
    reference = stack.remember(title, kind="event", occurred_at="2026-03-01T09:30:00Z")
    page = stack.client.get(_record_path(reference)).text
    (shown,) = re.findall(r"<title>(.*?)</title>", page, re.S)
    assert html.unescape(shown) == "invoice\\u202efdp.exe · MyMCP console"
    assert "Occurred 2026-03-01T09:30:00Z" in _text(page)


def test_a_title_s_line_breaks_show_where_it_is_one_line(stack: Stack) -> None:
    # A heading, a listing cell or a tab title would show a line break as a space.
    stack.sign_in()
    reference = stack.remember("multi\nline title")
    record = stack.client.get(_record_path(reference)).text
    (shown,) = re.findall(r"<title>(.*?)</title>", record, re.S)
    assert html.unescape(shown) == "multi\\x0aline title · MyMCP console"
    assert '<dd class="title">multi\\x0aline title</dd>' in record
    listing = stack.client.get("/console/memory/project/mnemosyne/decisions").text
    assert "multi\\x0aline title</a>" in listing
    assert "multi\nline" not in listing


@pytest.mark.parametrize(
    "path",
    [
        "/console/memory/project/approved%E2%80%AE%E2%81%A6%20by%20admin",
        "/console/memory/project/mnemosyne/evil%E2%80%AEcol",
        "/console/memory/record?scope=project&namespace=ns%E2%80%AE&collection=&id=mem_x",
    ],
)
def test_a_value_from_a_crafted_address_is_never_shown_raw(stack: Stack, path: str) -> None:
    stack.sign_in()
    page = stack.client.get(path).text
    assert "\u202e" not in page
    assert "\u2066" not in page


# -- audit ------------------------------------------------------------------------------------


def test_the_audit_page_shows_filters_and_verifies(stack: Stack) -> None:
    csrf = stack.sign_in()
    reference = stack.remember("Audited")
    stack.post(
        "/console/memory/record/archive",
        {
            "csrf": csrf,
            "scope": "project",
            "namespace": "mnemosyne",
            "collection": "decisions",
            "id": reference["id"],
            "expected_revision": "1",
        },
    )
    stack.client.get("/console/memory/project")
    page = stack.client.get("/console/audit")
    text = _text(page.text)
    assert "Intact:" in text
    assert "console_sign_in" in text
    assert "memory_archive" in text
    seqs = [int(n) for n in re.findall(r'<td data-label="#">(\d+)</td>', page.text)]
    assert seqs == sorted(seqs, reverse=True)
    assert len(seqs) > 3

    only = stack.client.get("/console/audit?tool=memory_archive&principal=console")
    rows = re.findall(r"<tr>\s*<td data-label=\"Time\">.*?</tr>", only.text, re.S)
    assert len(rows) == 2  # the decision and the outcome
    assert all("memory_archive" in row and "console" in row for row in rows)
    assert "allowed -&gt; ok" in rows[0]
    events = stack.client.get("/console/audit?event=console_sign_in&limit=1").text
    assert len(re.findall(r'<td data-label="Event">console_sign_in</td>', events)) == 1

    audit = stack.host.governance.audit
    assert audit is not None
    segment = next(audit.directory.glob("segment-*.jsonl"))
    lines = segment.read_bytes().splitlines(keepends=True)
    lines[0] = lines[0].replace(b'"seq":1', b'"seq":7')
    segment.write_bytes(b"".join(lines))
    broken = _text(stack.client.get("/console/audit").text)
    assert "Broken: segment-000001.jsonl line 1" in broken


def test_an_audit_directory_removed_while_serving_reads_as_broken(stack: Stack) -> None:
    stack.sign_in()
    audit = stack.host.governance.audit
    assert audit is not None
    audit.commit()
    audit.directory.rename(audit.directory.with_name("moved-aside"))
    page = stack.client.get("/console/audit")
    assert page.status_code == 200
    text = _text(page.text)
    assert "Broken: the audit directory cannot be read" in text
    assert "0 of the newest 0 records match" in text


def test_the_audit_page_shows_invisible_characters_as_escapes_and_filters_on_them(
    stack: Stack,
) -> None:
    stack.sign_in()
    audit = stack.host.governance.audit
    assert audit is not None
    lookalike = "operator:alice\u3164"
    audit.append("auth_failure", principal=lookalike, reason="x")
    audit.append("auth_failure", principal="operator:alice", reason="x")
    page = stack.client.get("/console/audit?event=auth_failure").text
    cells = re.findall(r'<td data-label="Principal" class="exact">(.*?)</td>', page)
    assert cells == ["operator:alice", "operator:alice\\u3164"]
    # The escaped form, copied from the page, finds the record it names; so does the raw one.
    for typed in ("operator:alice\\u3164", lookalike):
        found = stack.client.get("/console/audit", params={"principal": typed}).text
        assert re.findall(r'<td data-label="Principal" class="exact">(.*?)</td>', found) == [
            "operator:alice\\u3164"
        ]


def _thirty_failures_ten_searched(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Signed in, thirty `auth_failure` records after the sign-in, and a view that
    searches at most the newest ten records."""
    from mymcp.console import audit as console_audit

    stack.sign_in()
    audit = stack.host.governance.audit
    assert audit is not None
    for index in range(30):
        audit.append("auth_failure", principal=f"operator:p{index}", reason="x")
    monkeypatch.setattr(console_audit, "MAX_SEARCHED", 10)


def test_a_view_searches_a_bounded_number_of_the_newest_records(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    _thirty_failures_ten_searched(stack, monkeypatch)
    # The oldest record of all (the sign-in) is beyond the bound: not found, and said so.
    old = _text(stack.client.get("/console/audit?event=console_sign_in").text)
    assert "0 of the newest 10 records match" in old
    assert "Older records were not searched: mymcp audit show reads the whole log." in old
    # Enough matches among the newest: the search stops there, and nothing is missing.
    recent = stack.client.get("/console/audit?event=auth_failure&limit=3").text
    cells = re.findall(r'<td data-label="Principal" class="exact">(.*?)</td>', recent)
    assert cells == ["operator:p29", "operator:p28", "operator:p27"]
    assert "Older records were not searched" not in recent
    # The chain check still covers the whole log.
    assert "Intact: " in _text(recent)


def test_older_audit_records_are_reached_page_by_page(stack: Stack) -> None:
    stack.sign_in()
    audit = stack.host.governance.audit
    assert audit is not None
    for index in range(25):
        audit.append("auth_failure", principal=f"operator:p{index}", reason="x")
    seen: list[str] = []
    path = "/console/audit?event=auth_failure&limit=10"
    pages = 0
    while path:
        page = stack.client.get(html.unescape(path)).text
        pages += 1
        seen += re.findall(r'<td data-label="Principal" class="exact">(.*?)</td>', page)
        older = re.search(r'<a href="(/console/audit\?[^"]*)">Older records</a>', page)
        path = older.group(1) if older else ""
        if pages > 1:  # every older page leads back to the newest
            assert re.search(r'<a href="/console/audit\?event=auth_failure&amp;limit=10">', page)
        assert pages <= 4
    # Every record once, newest first, with the filter kept on every page.
    assert seen == [f"operator:p{index}" for index in reversed(range(25))]
    assert pages == 3


def test_an_older_page_reads_only_from_the_segment_it_starts_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mymcp.console import audit as console_audit

    log = AuditLog(tmp_path / "audit", max_segment_bytes=65536, max_segments=100)
    for index in range(3000):
        log.append("auth_failure", principal=f"operator:p{index}", reason="x")
    log.close()
    assert len(list((tmp_path / "audit").glob("segment-*"))) >= 6
    read: list[int] = []
    whole = console_audit.complete_records

    def counted(path: Path) -> Iterator[Any]:
        for record in whole(path):
            read.append(record["seq"])
            yield record

    monkeypatch.setattr(console_audit, "complete_records", counted)
    page = AuditView(log).load(AuditFilter(before=40, limit=5))
    assert [record["seq"] for record in page.records] == [39, 38, 37, 36, 35]
    assert page.older == 35
    # The newer segments were each looked at for their first record only.
    assert len(read) < 1000, len(read)


def test_a_page_cut_short_by_the_search_bound_leads_on_from_where_it_stopped(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    _thirty_failures_ten_searched(stack, monkeypatch)
    first = stack.client.get("/console/audit?event=console_sign_in").text
    assert "Older records were not searched" in first
    older = re.search(r'<a href="(/console/audit\?[^"]*)">Older records</a>', first)
    assert older is not None
    following = stack.client.get(html.unescape(older.group(1))).text
    # The search goes on below the records already searched, with the same filter.
    before = int(re.search(r"before=(\d+)", older.group(1)).group(1))
    shown = [int(n) for n in re.findall(r'<td data-label="#">(\d+)</td>', following)]
    assert all(seq < before for seq in shown)
    assert "console_sign_in" in following


@given(st.text(max_size=20))
@example("12")
@example("\u0661")
def test_any_audit_page_start_reads_as_a_record_number_or_none(before: str) -> None:
    chosen = AuditFilter.from_query({"before": before}).before
    if before.isascii() and before.isdigit() and len(before) <= 18:
        assert chosen == int(before)
    else:
        assert chosen is None


def test_the_audit_records_console_sign_in_and_out(stack: Stack) -> None:
    csrf = stack.sign_in()
    stack.post("/console/sign-out", {"csrf": csrf})
    audit = stack.host.governance.audit
    assert audit is not None
    audit.commit()
    events = [r["event"] for r in read_records(audit.directory)]
    assert events.count("console_sign_in") == 1
    assert events.count("console_sign_out") == 1


def test_signing_in_again_ends_the_session_the_browser_had(stack: Stack) -> None:
    stack.sign_in()
    (name,) = stack.client.cookies.keys()
    earlier = stack.client.cookies[name]
    stack.sign_in()  # the same browser, with a new one-time link
    later = stack.client.cookies[name]
    assert later != earlier
    assert stack.client.get("/console/approvals").status_code == 200
    # The replaced cookie, had it been copied anywhere, signs nobody in any more.
    with stack.another_browser() as other:
        other.cookies.set(name, earlier)
        assert other.get("/console/approvals").status_code == 403
    audit = stack.host.governance.audit
    assert audit is not None
    audit.commit()
    events = [r["event"] for r in read_records(audit.directory) if r["event"].startswith("console")]
    assert events == ["console_sign_in", "console_sign_out", "console_sign_in"]


@given(st.text(max_size=12))
@example("\u00b2")
@example("\u2460")
@example("1" * 7)
def test_any_audit_limit_reads_as_a_bounded_number(limit: str) -> None:
    chosen = AuditFilter.from_query({"limit": limit}).limit
    if limit.isascii() and limit.isdigit() and len(limit) <= 6:
        assert chosen == max(1, min(int(limit), MAX_LIMIT))
    else:  # "²" and "①" are digits to `str.isdigit`, not to `int`
        assert chosen == DEFAULT_LIMIT


def test_the_live_pending_list_shows_a_principal_s_invisible_characters() -> None:
    # A subject may hold a line separator (it is no control character), which would
    # break the line it is shown on; the live list shows it as the page does.
    store = Approvals(frozenset({"notes__write"}), 600)
    store.check(
        principal="operator:a\u2028b",
        principal_id="operator:a",
        session_id="s",
        tool="notes__write",
        arguments={},
        args_digest=None,
    )
    (item,) = pending_summary(store.pending())
    assert item["principal"] == "operator:a\\u2028b"


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("invalid_request", 400),
        ("not_found", 404),
        ("conflict", 409),
        ("storage_error", 503),
        ("retrieval_error", 503),
        ("internal_error", 500),
        ("uncertain", 500),
        ("policy_error", 418),  # a refusal of its own: the page's answer
        ("refused", 418),
    ],
)
def test_a_failed_tool_result_gets_the_status_of_what_went_wrong(
    status: str, expected: int
) -> None:
    """409 is for a real conflict only; the server's own trouble is a 5xx."""
    assert Outcome(False, {"status": status}).http_status(otherwise=418) == expected
    assert Outcome(True, {"status": "ok"}).http_status(otherwise=418) == 200


def test_a_namespace_the_partial_listing_missed_can_be_opened_by_its_id(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mymcp.console.memory as console_memory

    stack.sign_in()
    for name in ("alpha", "omega"):
        stack.remember(
            f"In {name}", namespace={"kind": "project", "id": name, "label": name.title()}
        )
    # One page of one record is all a scope page looks at here: "omega" is not named.
    monkeypatch.setattr(console_memory, "MAX_CONTAINER_PAGES", 1)
    monkeypatch.setattr(console_memory, "CONTAINER_PAGE_SIZE", 1)
    scope_page = stack.client.get("/console/memory/project").text
    assert "Only the first records were looked at" in scope_page
    assert '<label for="open-container">Open a namespace by its id</label>' in scope_page
    opened = stack.client.get(
        "/console/memory/project", params={"open": " omega "}, follow_redirects=False
    )
    assert (opened.status_code, opened.headers["location"]) == (
        303,
        "/console/memory/project/omega",
    )
    assert "In omega" in stack.client.get(opened.headers["location"]).text
    # Whatever is typed stays one path segment, for the listing to refuse.
    odd = stack.client.get(
        "/console/memory/project", params={"open": "../x"}, follow_redirects=False
    )
    assert odd.headers["location"] == "/console/memory/project/..%2Fx"

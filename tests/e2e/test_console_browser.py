"""The console in a real browser: Debian's Chromium driven by Playwright for Python.

The real `mymcp` server runs with host approval on (`[approval] tools =
["@consent_required"]`) and every memory mutation switched on; people sign in with the
link the real `mymcp console --no-browser` prints, and agents are the official MCP SDK
client. Every page visited is saved as a screenshot under the test's tmp dir
(`screenshots/`). Without Debian's `chromium` on PATH these tests are skipped, saying
so; Playwright itself is part of the test extra, and its own browser download is never
used.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from playwright.async_api import async_playwright

from mymcp.auth import CONSOLE
from mymcp.host import build_host
from mymcp.transport import Caller, Dispatcher
from tests.e2e.server import RunningServer, Sandbox, free_port, make_sandbox, run_cli, serve

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="Debian's chromium is not installed (apt-get install -y chromium): "
        "the console browser tests need a real browser",
    ),
]

GATES = {
    "MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "true",
    "MNEMOSYNE_MEMORY_ARCHIVE_RESTORE_ENABLED": "true",
    "MNEMOSYNE_MEMORY_REVISE_ENABLED": "true",
    "MNEMOSYNE_MEMORY_FORGET_ENABLED": "true",
}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
XSS_TITLE = "<script>alert(1)</script>"
XSS_CONTENT = '<img src=x onerror="alert(2)"><b>not bold</b>'
XSS_TAG = "<svg onload=alert(3)>"
XSS_NAMESPACE_LABEL = "<b>namespace</b><script>alert(4)</script>"
XSS_COLLECTION_LABEL = "\"'><iframe src=javascript:alert(5)>"
MARKUP = "main img, main b, main svg, main iframe"
"""Elements that only an unescaped value could have put into a page's main part."""
LONG_TEXT = (
    "We decided to use PostgreSQL 16 for the event store, see https://example.com/adr/"
    "0007-event-store-postgresql-decision-record-final-version for the ADR. "
) * 3
TIMEOUT_MS = 15_000


@dataclass
class Console:
    sandbox: Sandbox
    server: RunningServer
    records: dict[str, dict[str, Any]]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def env(self) -> dict[str, str]:
        return self.sandbox.environ(GATES)

    def sign_in_url(self) -> str:
        printed = run_cli(["console", "--no-browser"], self.env)
        assert printed.returncode == 0, printed.stderr
        url = printed.stdout.strip()
        assert url.startswith(f"{self.base}/console/sign-in?token=")
        return url


def _config(sandbox: Sandbox) -> str:
    return (
        "schema_version = 8\n"
        + sandbox.server_table()
        + "\n[authentication]\nanonymous_enabled = true\n"
        + '\n[approval]\ntools = ["@consent_required"]\n'
    )


def _seed(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Records written by the real tool before the server starts, as the console would."""
    host = build_host(env, with_audit=False)
    dispatcher = Dispatcher(host.runtime, None)
    remember = host.runtime.registry.get("memory_remember")
    assert remember is not None
    xss_place = {
        "namespace": {"kind": "project", "id": "xss", "label": XSS_NAMESPACE_LABEL},
        "collection": {"id": "xsscol", "label": XSS_COLLECTION_LABEL},
        "tags": [XSS_TAG],
    }
    seeds: dict[str, tuple[str, str, dict[str, Any]]] = {
        "browse": ("Browse target", "A record to browse to.", {}),
        "forget": ("Forget me", "A record to forget through the console.", {}),
        "archive": ("Archive me without JavaScript", "A record to archive by plain forms.", {}),
        "xss": (XSS_TITLE, XSS_CONTENT, xss_place),
    }
    references: dict[str, dict[str, Any]] = {}
    for key, (title, content, place) in seeds.items():
        arguments = {
            "scope": "project",
            "namespace": {"kind": "project", "id": "mnemosyne", "label": "Mnemosyne"},
            "collection": {"id": "decisions", "label": "Decisions"},
            "kind": "decision",
            "language": "en",
            "title": title,
            "content": content,
            "tags": ["browser"],
            "origin": "user_approved_proposal",
            **place,
        }
        result = anyio.run(dispatcher.execute, Caller(CONSOLE), remember, arguments)
        assert result["structuredContent"]["status"] == "remembered", result
        references[key] = result["structuredContent"]["reference"]
    return references


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    sandbox = make_sandbox(tmp_path_factory.mktemp("console-browser"))
    sandbox.port = free_port()
    sandbox.write_config(_config(sandbox))
    records = _seed(sandbox.environ(GATES))
    with serve(sandbox, GATES) as server:
        yield Console(sandbox, server, records)


# -- browser and client helpers ---------------------------------------------------------------


@asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


class Shots:
    """Saves a full-page screenshot of each page under the test's tmp dir."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(exist_ok=True)

    async def take(self, page: Any, name: str) -> None:
        path = self.directory / f"{name}.png"
        await page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 1000


@pytest.fixture
def shots(tmp_path: Path) -> Shots:
    return Shots(tmp_path / "screenshots")


@dataclass
class Person:
    """A signed-in browser context, its page, and every dialog a page tried to open."""

    context: Any
    page: Any
    dialogs: list[str]


async def _signed_in(
    browser: Any, console: Console, width: int = 1280, *, javascript: bool = True
) -> Person:
    """A new browser context signed in with a fresh one-time link."""
    context = await browser.new_context(
        viewport={"width": width, "height": 900}, java_script_enabled=javascript
    )
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    url = await anyio.to_thread.run_sync(console.sign_in_url)
    response = await page.goto(url)
    assert response is not None
    assert response.status == 200
    assert page.url == f"{console.base}/console/approvals"
    assert await page.locator("h1").inner_text() == "Approvals"
    return Person(context, page, dialogs)


@asynccontextmanager
async def mcp_client(console: Console, *, url_elicitation: bool = False) -> AsyncIterator[Any]:
    """The official SDK client; with `url_elicitation` it declares URL-mode elicitation."""

    async def elicit(context: Any, params: Any) -> Any:
        raise AssertionError("the server never sends elicitation requests")

    callback = elicit if url_elicitation else None
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http,
        Client(
            streamable_http_client(console.server.url, http_client=http),
            mode="legacy",
            elicitation_callback=callback,
        ) as client,
    ):
        yield client


async def _call(client: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The structured result, or for a -32042 error its single URL elicitation."""
    try:
        result = await client.call_tool(tool, arguments)
    except MCPError as exc:
        error = exc.error
    else:
        return dict(result.structured_content or {})
    assert error.code == -32042, error
    (elicitation,) = error.data["elicitations"]
    return {"status": "url_elicitation", **elicitation}


def _remember_arguments(title: str) -> dict[str, Any]:
    return {
        "scope": "project",
        "namespace": {"kind": "project", "id": "mnemosyne", "label": "Mnemosyne"},
        "collection": {"id": "decisions", "label": "Decisions"},
        "kind": "decision",
        "language": "en",
        "title": title,
        "content": f"Proposed by an agent: {title}.",
        "tags": ["agent"],
        "origin": "user_approved_proposal",
    }


async def _fits(page: Any, width: int) -> None:
    scroll = await page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, (page.url, scroll)


async def _widths(page: Any, selector: str) -> list[float]:
    """The rendered widths of every element `selector` matches, in CSS pixels."""
    return list(
        await page.evaluate(
            "(selector) => [...document.querySelectorAll(selector)]"
            ".map(e => e.getBoundingClientRect().width)",
            selector,
        )
    )


# -- the tests ----------------------------------------------------------------------------------


def test_the_one_time_link_signs_in_once(console: Console, shots: Shots) -> None:
    async def scenario() -> None:
        async with chromium() as browser:
            person = await _signed_in(browser, console)
            context, page = person.context, person.page
            await shots.take(page, "approvals")
            (cookie,) = await context.cookies()
            assert cookie["name"] == f"mymcp_console_{console.server.port}"
            assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (
                True,
                "Strict",
                "/console",
            )
            assert "token=" not in page.url  # the redirect took it out of the address bar
            used = await anyio.to_thread.run_sync(console.sign_in_url)
            await page.goto(used)  # this first use signs this browser in again
            stranger = await browser.new_context()
            refused_page = await stranger.new_page()
            refused = await refused_page.goto(used)
            assert refused is not None
            assert refused.status == 403
            assert "already used" in await refused_page.locator("h1").inner_text()
            assert await stranger.cookies() == []
            await shots.take(refused_page, "sign-in-refused")
            blocked = await refused_page.goto(f"{console.base}/console/memory")
            assert blocked is not None
            assert blocked.status == 403
            await shots.take(refused_page, "sign-in-required")

    anyio.run(scenario)


def test_approving_and_denying_calls_end_to_end(console: Console, shots: Shots) -> None:
    async def scenario() -> None:
        async with chromium() as browser, mcp_client(console) as agent:
            page = (await _signed_in(browser, console)).page
            await page.evaluate("window.stillTheSamePage = true")
            arguments = _remember_arguments("Approved in the browser")
            asked = await _call(agent, "memory_remember", arguments)
            assert asked["status"] == "approval_required"
            url = asked["approval_url"]
            assert url.startswith(f"{console.base}/console/approvals/")
            path = url.removeprefix(console.base)
            # The pending list picks the request up by itself, without a reload.
            link = page.locator(f'#pending a[href="{path}"]')
            await link.wait_for()
            assert await page.evaluate("window.stillTheSamePage") is True
            assert await link.inner_text() == "memory_remember"
            await shots.take(page, "approvals-live")

            await link.click()
            await page.wait_for_url(url)
            text = await page.locator("main").inner_text()
            assert "Waiting for your decision." in text
            assert "anonymous" in text
            shown = json.loads(await page.locator("pre.arguments").inner_text())
            assert shown == arguments
            await shots.take(page, "approval-pending")
            await page.get_by_role("button", name="Approve").click()
            await page.wait_for_url(url)
            state = page.locator("p.state")
            assert (await state.inner_text()).startswith("Approved.")
            await shots.take(page, "approval-granted")

            ran = await _call(agent, "memory_remember", arguments)
            assert ran["status"] == "remembered", ran
            again = await _call(agent, "memory_remember", arguments)
            assert again["status"] == "approval_required"  # one approval, one run
            assert again["approval_url"] != url
            await page.reload()
            assert "Approved and used" in await state.inner_text()

        async with chromium() as browser, mcp_client(console, url_elicitation=True) as agent:
            page = (await _signed_in(browser, console)).page
            arguments = _remember_arguments("Denied in the browser")
            asked = await _call(agent, "memory_remember", arguments)
            assert asked["status"] == "url_elicitation"
            assert asked["mode"] == "url"
            await page.goto(asked["url"])
            await page.get_by_role("button", name="Deny").click()
            await page.wait_for_url(asked["url"])
            assert (await page.locator("p.state").inner_text()).startswith("Denied.")
            await shots.take(page, "approval-denied")
            refused = await _call(agent, "memory_remember", arguments)
            assert refused["status"] == "approval_denied"

    anyio.run(scenario)


_POSITIONS = """(needles) => {
    const text = document.querySelector("pre.arguments").firstChild;
    return needles.map((needle) => {
        const start = text.data.indexOf(needle);
        const range = document.createRange();
        range.setStart(text, start);
        range.setEnd(text, start + needle.length);
        const box = range.getClientRects()[0];
        return [box.left, box.top];
    });
}"""


def test_the_approval_page_shows_right_to_left_text_in_the_order_it_runs(
    console: Console, shots: Shots
) -> None:
    async def scenario() -> None:
        async with chromium() as browser, mcp_client(console) as agent:
            page = (await _signed_in(browser, console)).page
            # Hebrew letters would otherwise move the digits and slashes next to them:
            # the page would show /srv/2024/01/ש/data while the call names /srv/ש/2024/01.
            title = "/srv/\u05e9/2024/01/data"
            asked = await _call(agent, "memory_remember", _remember_arguments(title))
            await page.goto(asked["approval_url"])
            await shots.take(page, "approval-right-to-left")
            positions = await page.evaluate(_POSITIONS, ["/srv/", "\u05e9", "2024", "/data"])
            lefts = [left for left, top in positions if top == positions[0][1]]
            assert len(lefts) == 4  # on one line, so left to right is reading order
            assert lefts == sorted(lefts), lefts
            # The decision comes after every argument, never above a part not yet seen.
            after = await page.evaluate(
                "document.querySelector('pre.arguments')"
                ".compareDocumentPosition(document.querySelector('form.decision'))"
            )
            assert after & 4  # Node.DOCUMENT_POSITION_FOLLOWING

    anyio.run(scenario)


def test_browsing_to_a_record(console: Console, shots: Shots) -> None:
    async def scenario() -> None:
        async with chromium() as browser:
            for width in (1280, 375):
                page = (await _signed_in(browser, console, width)).page
                await _fits(page, width)
                await page.get_by_role("link", name="Audit", exact=True).click()
                await page.wait_for_url("**/console/audit")  # loaded, with its stylesheet
                await _fits(page, width)
                await shots.take(page, f"audit-{width}")
                await page.get_by_role("link", name="Memory", exact=True).click()
                await shots.take(page, f"memory-{width}")
                steps = [("project", "scope"), ("mnemosyne", "namespace")]
                steps += [("decisions", "collection"), ("Browse target", "record")]
                for name, shot in steps:
                    await page.get_by_role("link", name=name, exact=True).first.click()
                    await page.wait_for_load_state()
                    await _fits(page, width)
                    await shots.take(page, f"{shot}-{width}")
                for label, value in (("Status", "active"), ("Revision", "1")):
                    field = page.locator(f'dl.fields dt:text-is("{label}") + dd')
                    assert await field.inner_text() == value
                assert "A record to browse to." in await page.locator("pre.content").inner_text()
                await page.get_by_role("link", name="Memory", exact=True).first.click()
                await page.get_by_label("Scope", exact=True).select_option("project")
                await page.get_by_label("Words to look for").fill("browse")
                await page.get_by_role("button", name="Search").click()
                await page.wait_for_url("**/console/memory/search?**")
                await shots.take(page, f"search-{width}")
                result = page.locator("ol.cards a.title")
                assert await result.all_inner_texts() == ["Browse target"]

    anyio.run(scenario)


def test_forgetting_a_record_through_the_console(console: Console, shots: Shots) -> None:
    reference = console.records["forget"]

    async def scenario() -> None:
        async with chromium() as browser:
            page = (await _signed_in(browser, console)).page
            collection = f"{console.base}/console/memory/project/mnemosyne/decisions"
            await page.goto(collection)
            await page.get_by_role("link", name="Forget me", exact=True).click()
            assert await page.get_by_role("link", name="Forget…").count() == 0
            await page.get_by_role("link", name="Archive…").click()
            await shots.take(page, "confirm-archive")
            await page.get_by_role("button", name="Archive").click()
            await page.wait_for_url("**done=archived")
            assert "Archived" in await page.locator("p.notice").inner_text()
            await page.get_by_role("link", name="Forget…").click()
            await shots.take(page, "confirm-forget")
            assert "cannot be undone" in await page.locator("main").inner_text()
            await page.get_by_role("button", name="Forget permanently").click()
            await page.wait_for_url(f"{collection}?done=forgotten")
            assert "Forgotten" in await page.locator("p.notice").inner_text()
            assert await page.get_by_role("link", name="Forget me", exact=True).count() == 0
            await shots.take(page, "forgotten")

            await page.goto(f"{console.base}/console/audit?tool=memory_forget&principal=console")
            rows = await page.locator("table.audit tbody tr").all_inner_texts()
            assert len(rows) == 2  # the decision, written before the file went, and the outcome
            assert "allowed -> ok" in rows[0]
            assert (await page.locator("p.state").inner_text()).startswith("Intact:")
            await shots.take(page, "audit")

    anyio.run(scenario)
    files = [p.name for p in console.sandbox.memory_root.rglob("*.json")]
    assert not any(reference["id"] in name for name in files)
    assert any(console.records["browse"]["id"] in name for name in files)


def test_memory_content_is_shown_as_text(console: Console, shots: Shots) -> None:
    reference = console.records["xss"]

    async def scenario() -> None:
        async with chromium() as browser, mcp_client(console) as agent:
            person = await _signed_in(browser, console)
            page = person.page
            revise = {
                "reference": reference,
                "expected_revision": 1,
                "namespace_label": XSS_NAMESPACE_LABEL + " (revised)",
                "collection_label": XSS_COLLECTION_LABEL + " (revised)",
                "title": XSS_TITLE + " (revised)",
                "content": XSS_CONTENT,
                "tags": [XSS_TAG, "browser"],
            }
            asked = await _call(agent, "memory_revise", revise)
            record = (
                f"{console.base}/console/memory/record?scope=project&namespace=xss"
                f"&collection=xsscol&id={reference['id']}"
            )
            everything = [XSS_TITLE, XSS_CONTENT, XSS_TAG, XSS_NAMESPACE_LABEL]
            everything.append(XSS_COLLECTION_LABEL)
            search = f"{console.base}/console/memory/search?scope=project&q=alert+bold"
            pages = {
                "xss-collection": (
                    f"{console.base}/console/memory/project/xss/xsscol",
                    [XSS_TITLE],
                ),
                "xss-record": (record, everything),
                "xss-confirm": (record.replace("/record?", "/record/archive?"), everything),
                "xss-search": (search, [XSS_TITLE, XSS_CONTENT, XSS_TAG]),
                "xss-approval": (asked["approval_url"], everything),
            }
            for name, (url, shown) in pages.items():
                await page.goto(url)
                text = await page.locator("main").inner_text()
                for value in shown:
                    assert value in text, (name, value)
                scripts = await page.evaluate(
                    "[...document.scripts].map(s => s.src || s.textContent)"
                )
                assert scripts == [f"{console.base}/console/static/console.js"], name
                assert await page.locator(MARKUP).count() == 0, name
                await shots.take(page, name)
            row = page.locator("table.compare tr", has=page.locator("th", has_text="Tags"))
            tags = row.locator("pre")
            stored, proposed = [json.loads(t) for t in await tags.all_inner_texts()]
            assert (stored, proposed) == ([XSS_TAG], [XSS_TAG, "browser"])
            assert person.dialogs == []

    anyio.run(scenario)


def test_forged_posts_are_refused(console: Console, shots: Shots) -> None:
    async def scenario() -> None:
        async with chromium() as browser, mcp_client(console) as agent:
            person = await _signed_in(browser, console)
            context, page = person.context, person.page
            asked = await _call(agent, "memory_remember", _remember_arguments("Never approved"))
            url = asked["approval_url"]
            await page.goto(url)
            csrf = await page.locator('form.decision input[name="csrf"]').get_attribute("value")
            assert csrf

            same_origin = {"Origin": console.base}
            missing = await context.request.post(
                url, form={"decision": "approve"}, headers=same_origin
            )
            assert missing.status == 403
            wrong = await context.request.post(
                url, form={"decision": "approve", "csrf": csrf + "x"}, headers=same_origin
            )
            assert wrong.status == 403
            foreign = await context.request.post(
                url,
                form={"decision": "approve", "csrf": csrf},
                headers={"Origin": "http://127.0.0.2:9"},
            )
            assert foreign.status == 403

            # A page of another origin that auto-submits the form, even with the token.
            attacker = f"http://127.0.0.2:{free_port()}/"
            form = (
                f'<form method="post" action="{url}"><input name="decision" value="approve">'
                f'<input name="csrf" value="{csrf}"></form>'
                "<script>document.forms[0].submit()</script>"
            )
            await page.route(
                attacker, lambda route: route.fulfill(body=form, content_type="text/html")
            )
            async with page.expect_response(url) as answered:
                await page.goto(attacker)
            assert (await answered.value).status == 403
            await page.wait_for_load_state()
            await shots.take(page, "forged-post-refused")

            await page.goto(url)
            assert (await page.locator("p.state").inner_text()).startswith("Waiting")
            still = await _call(agent, "memory_remember", _remember_arguments("Never approved"))
            assert still["status"] == "approval_required"
            assert still["approval_url"] == url

    anyio.run(scenario)


def test_approval_and_confirm_pages_fit_375_px(console: Console, shots: Shots) -> None:
    browse = console.records["browse"]

    async def scenario() -> None:
        async with chromium() as browser, mcp_client(console) as agent:
            page = (await _signed_in(browser, console, 375)).page
            revise = {
                "reference": browse,
                "expected_revision": 1,
                "namespace_label": "Mnemosyne",
                "collection_label": "Decisions",
                "title": "Browse target",
                "content": LONG_TEXT,
                "tags": ["browser", "database"],
            }
            revision = (await _call(agent, "memory_revise", revise))["approval_url"]
            unbroken = _remember_arguments("Long " + "x" * 190)
            unbroken["content"] = "y" * 3000 + LONG_TEXT
            long_call = (await _call(agent, "memory_remember", unbroken))["approval_url"]
            archive = (
                await _call(agent, "memory_archive", {"reference": browse, "expected_revision": 1})
            )["approval_url"]
            record = (
                f"{console.base}/console/memory/record?scope=project&namespace=mnemosyne"
                f"&collection=decisions&id={browse['id']}"
            )
            pages = {
                "approval-revise-375": revision,
                "approval-long-375": long_call,
                "approval-archive-375": archive,
                "confirm-archive-375": record.replace("/record?", "/record/archive?"),
            }
            for name, url in pages.items():
                response = await page.goto(url)
                assert response is not None
                assert response.status == 200, name
                await _fits(page, 375)
                await shots.take(page, name)
            # The revision's columns stack: each field's name and both of its values take
            # the whole width, instead of three columns squeezed to a few letters each.
            await page.goto(revision)
            main = (await _widths(page, "main"))[0]
            for selector in ("table.compare th[scope=row]", "table.compare td pre"):
                widths = await _widths(page, selector)
                assert len(widths) >= 5, selector
                assert min(widths) >= 0.75 * main, (selector, widths, main)
            labels = await page.evaluate(
                "[...document.querySelectorAll('table.compare tbody tr:first-child td')]"
                ".map(e => getComputedStyle(e, '::before').content)"
            )
            assert labels == ['"Stored now"', '"Proposed"']  # each value says which it is
            await page.set_viewport_size({"width": 1280, "height": 900})
            wide = await _widths(page, "table.compare td pre")
            assert max(wide) <= 0.5 * (await _widths(page, "main"))[0]  # side by side
            await shots.take(page, "approval-revise-1280")

    anyio.run(scenario)


def test_the_console_works_without_javascript(console: Console, shots: Shots) -> None:
    archive = console.records["archive"]

    async def scenario() -> None:
        async with chromium() as browser, mcp_client(console) as agent:
            person = await _signed_in(browser, console, javascript=False)
            context, page = person.context, person.page
            probe = await context.new_page()
            await probe.route(
                "http://probe.invalid/",
                lambda route: route.fulfill(
                    body="<title>off</title><script>document.title = 'ran'</script>",
                    content_type="text/html",
                ),
            )
            await probe.goto("http://probe.invalid/")
            assert await probe.title() == "off"  # scripts really do not run here
            await probe.close()

            for decision, expected in (("Approve", "remembered"), ("Deny", "approval_denied")):
                arguments = _remember_arguments(f"{decision}d without JavaScript")
                asked = await _call(agent, "memory_remember", arguments)
                url = asked["approval_url"]
                await page.goto(f"{console.base}/console/approvals")  # a reload, not live
                await page.locator(f'#pending a[href="{url.removeprefix(console.base)}"]').click()
                await page.wait_for_url(url)
                shown = json.loads(await page.locator("pre.arguments").inner_text())
                assert shown == arguments
                await page.get_by_role("button", name=decision).click()
                await page.wait_for_url(url)
                state = await page.locator("p.state").inner_text()
                assert state.startswith("Approved." if decision == "Approve" else "Denied.")
                await shots.take(page, f"nojs-{decision.lower()}d")
                assert (await _call(agent, "memory_remember", arguments))["status"] == expected

            await page.get_by_role("link", name="Memory", exact=True).click()
            for name in ("project", "mnemosyne", "decisions", "Browse target"):
                await page.get_by_role("link", name=name, exact=True).first.click()
                await page.wait_for_load_state()
            assert "A record to browse to." in await page.locator("pre.content").inner_text()
            await shots.take(page, "nojs-record")
            await page.get_by_role("link", name="Memory", exact=True).first.click()
            await page.get_by_label("Scope", exact=True).select_option("project")
            await page.get_by_label("Words to look for").fill("browse")
            await page.get_by_role("button", name="Search").click()
            await page.wait_for_url("**/console/memory/search?**")
            assert await page.locator("ol.cards a.title").all_inner_texts() == ["Browse target"]

            await page.goto(
                f"{console.base}/console/memory/record?scope=project&namespace=mnemosyne"
                f"&collection=decisions&id={archive['id']}"
            )
            await page.get_by_role("link", name="Archive…").click()
            await page.get_by_role("button", name="Archive").click()
            await page.wait_for_url("**done=archived")
            assert "Archived" in await page.locator("p.notice").inner_text()
            await shots.take(page, "nojs-archived")

            await page.get_by_role("button", name="Sign out").click()
            assert await page.locator("h1").inner_text() == "Signed out"
            await page.goto(f"{console.base}/console/approvals")
            assert "Sign in" in await page.locator("h1").inner_text()

    anyio.run(scenario)

"""The console's routes: sign-in, approvals, memory and audit pages, and static files.

Pages are rendered on the server from Jinja2 templates with autoescaping on, so every
value that reaches a page (memory titles and content, tool arguments, audit fields) is
HTML-escaped. A page needs a live console session; a form post needs, in addition, the
session's CSRF token. The same-origin and Host rules and the security headers are the
guard's (`guard.py`), applied before and after every route here.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, quote

import jinja2
from anyio import to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route, Router

from mymcp._escaping import escape_invisible
from mymcp.auth import CONSOLE
from mymcp.config import BUNDLED_PLUGIN_ID
from mymcp.console.access import (
    SESSION_LIFETIME_SECONDS,
    ConsoleSession,
    ConsoleSessions,
    Redemption,
    read_session_epoch,
    redeem_sign_in,
)
from mymcp.console.approvals import STATE_TEXT, describe, pending_summary, visible
from mymcp.console.audit import AuditFilter, AuditView, readable
from mymcp.console.guard import ConsoleGuard
from mymcp.console.memory import (
    ANY_COLLECTION,
    LIFECYCLE_ACTIONS,
    MemoryBrowser,
    Selector,
    reference_from_query,
    reference_query,
)
from mymcp.governance import Approval, ApprovalError, Approvals, AuditLog, rfc3339
from mymcp.plugin import QualifiedCapabilityId
from mymcp.runtime import HostRuntime
from mymcp.transport import Caller, Dispatcher, TransportOptions

__all__ = ["ConsolePages", "create_console"]

_log = logging.getLogger("mymcp.console")

MAX_FORM_BYTES: Final = 16384
MAX_RECENT_APPROVALS: Final = 50
_APPROVAL_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NO_COLLECTION: Final = "-"
_STATIC_TYPES: Final = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
_SIGN_IN_REFUSALS: Final[Mapping[Redemption, tuple[str, str]]] = {
    Redemption.USED: (
        "This sign-in link was already used",
        "Each link signs in once. Run `mymcp console` in your terminal for a new one.",
    ),
    Redemption.EXPIRED: (
        "This sign-in link has expired",
        "Links are valid for five minutes. Run `mymcp console` in your terminal for a new one.",
    ),
    Redemption.UNKNOWN: (
        "This sign-in link is not valid",
        "Run `mymcp console` in your terminal and open the link it prints.",
    ),
    Redemption.UNAVAILABLE: (
        "Sign-in is unavailable",
        "The server cannot use its console state directory safely; the server log and "
        "`mymcp console` name the problem.",
    ),
}
_DONE: Final[Mapping[str, str]] = {
    "archived": "Archived: the record is kept but no longer recalled.",
    "already_archived": "The record was already archived.",
    "restored": "Restored: the record is active again.",
    "already_active": "The record was already active.",
    "forgotten": "Forgotten: the record was deleted permanently.",
}
_ACTION_TEXT: Final[Mapping[str, tuple[str, str, str]]] = {
    "archive": (
        "Archive this record?",
        "Archive",
        "It stays stored and inspectable, but recall no longer finds it.",
    ),
    "restore": ("Restore this record?", "Restore", "Recall finds it again."),
    "forget": (
        "Forget this record permanently?",
        "Forget permanently",
        "The file is deleted. This cannot be undone.",
    ),
}

Handler = Callable[[Request, ConsoleSession], Awaitable[Response]]
FormHandler = Callable[[Request, ConsoleSession, dict[str, str]], Awaitable[Response]]


def _by_method(
    show: Callable[[Request], Awaitable[Response]], act: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """One endpoint for a page and the form it posts: one route per path, so that a
    refused method is answered with every method the path has (`Allow`)."""

    async def endpoint(request: Request) -> Response:
        return await (act if request.method == "POST" else show)(request)

    return endpoint


def _templates() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("mymcp.console", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["visible"] = visible
    # Where a value shows on one line (a title, a heading, a tag, a name), a line break
    # in it would read as a space: it is escaped there too, as any invisible character is.
    environment.filters["visible_line"] = escape_invisible
    environment.globals["record_query"] = reference_query
    environment.globals["record_url"] = lambda ref: "/console/memory/record?" + reference_query(ref)
    environment.globals["segment"] = lambda text: quote(str(text), safe="")
    return environment


def _static_files() -> dict[str, tuple[bytes, str]]:
    folder = resources.files("mymcp.console") / "static"
    return {
        name: ((folder / name).read_bytes(), _STATIC_TYPES[Path(name).suffix])
        for name in ("console.css", "console.js", "icon.svg")
    }


async def _read_form(request: Request) -> dict[str, str] | None:
    """A bounded url-encoded form with unique field names, or None."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=32)
    except (UnicodeDecodeError, ValueError):
        return None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            return None
        form[name] = value
    return form


class ConsolePages:
    """Every console route, over the state they share."""

    def __init__(
        self,
        *,
        memory: MemoryBrowser,
        approvals: Approvals | None,
        audit: AuditLog | None,
        state_directory: Path | None,
        cookie_name: str,
        clock: Callable[[], float],
    ) -> None:
        self._memory = memory
        self._approvals = approvals
        self._audit = audit
        self._audit_view = AuditView(audit) if audit is not None else None
        self._directory = state_directory
        self._cookie = cookie_name
        self._clock = clock
        self._sessions = ConsoleSessions(clock)
        self._templates = _templates()
        self._static = _static_files()

    @property
    def sessions(self) -> ConsoleSessions:
        return self._sessions

    def router(self) -> Router:
        page, action = self._page, self._action
        routes = [
            Route("/", self._home, methods=["GET"]),
            Route("/console", self._home, methods=["GET"]),  # the bare path, unmounted
            Route("/sign-in", self._sign_in, methods=["GET"]),
            Route("/sign-out", action(self._sign_out, "sign_out"), methods=["POST"]),
            Route("/static/{name}", self._static_file, methods=["GET"]),
            Route("/approvals", page(self._approval_list), methods=["GET"]),
            Route("/approvals.json", self._approval_feed, methods=["GET"]),
            Route(
                "/approvals/{approval_id}",
                _by_method(page(self._approval), action(self._decide, "approval")),
                methods=["GET", "POST"],
            ),
            Route("/memory", page(self._memory_home), methods=["GET"]),
            Route("/memory/search", page(self._search), methods=["GET"]),
            Route("/memory/record", page(self._record), methods=["GET"]),
            Route(
                "/memory/record/{action}",
                _by_method(page(self._confirm), action(self._change, "memory_change")),
                methods=["GET", "POST"],
            ),
            Route("/memory/{scope}", page(self._listing), methods=["GET"]),
            Route("/memory/{scope}/{namespace}", page(self._listing), methods=["GET"]),
            Route("/memory/{scope}/{namespace}/{collection}", page(self._listing), methods=["GET"]),
            Route("/audit", page(self._audit_page), methods=["GET"]),
        ]
        return Router(routes=routes, default=self._not_found)

    # -- rendering and access -----------------------------------------------------------

    def _render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("session", None)
        context.setdefault("section", "")
        html = self._templates.get_template(template).render(**context)
        return HTMLResponse(html, status_code=status)

    def _message(
        self, status: int, heading: str, *lines: str, session: ConsoleSession | None = None
    ) -> HTMLResponse:
        return self._render(
            "message.html", status, heading=heading, lines=lines, session=session, again=None
        )

    def _session(self, request: Request) -> ConsoleSession | None:
        cookie = request.cookies.get(self._cookie)
        if not cookie:
            return None
        return self._sessions.lookup(cookie, read_session_epoch(self._directory))

    def _sign_in_required(self, request: Request) -> Response:
        if read_session_epoch(self._directory) is None:
            heading, line = _SIGN_IN_REFUSALS[Redemption.UNAVAILABLE]
            return self._message(
                503, heading, line, "A console session already open resumes once it is fixed."
            )
        again = request.url.path if request.method == "GET" else None
        if again is not None and request.url.query:
            again += "?" + request.url.query
        return self._render(
            "message.html",
            403,
            heading="Sign in to the MyMCP console",
            lines=(
                "Run `mymcp console` in a terminal on this machine and open the link it "
                "prints (it signs you in once, for 8 hours).",
                "MCP credentials never open the console: only the person at the terminal can.",
            ),
            again=again,
        )

    def _page(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = self._session(request)
            if session is None:
                return self._sign_in_required(request)
            return await handler(request, session)

        return endpoint

    def _action(self, handler: FormHandler, route: str) -> Callable[[Request], Awaitable[Response]]:
        """A form post's endpoint; `route` names it in the log. The log never gets the
        request's path: its approval id or action is the client's free text, and may
        hold control characters that would forge log lines or drive a terminal."""

        async def endpoint(request: Request) -> Response:
            session = self._session(request)
            if session is None:
                return self._sign_in_required(request)
            form = await _read_form(request)
            if form is None:
                return self._message(400, "Bad request", "The form could not be read.")
            if not session.accepts(form.get("csrf", "")):
                _log.warning("console csrf_refused route=%s", route)
                return self._message(
                    403,
                    "Forbidden",
                    "The form did not carry this session's CSRF token. Reload the page "
                    "and try again.",
                    session=session,
                )
            return await handler(request, session, form)

        return endpoint

    async def _not_found(self, scope: Any, receive: Any, send: Any) -> None:
        response = self._message(404, "Not found", "There is no console page here.")
        await response(scope, receive, send)

    # -- sign-in ----------------------------------------------------------------------

    async def _home(self, request: Request) -> Response:
        return RedirectResponse("/console/approvals", status_code=303)

    async def _sign_in(self, request: Request) -> Response:
        if request.method == "HEAD":
            # Link checkers and previews ask with HEAD: only a GET, a person opening the
            # link, spends it.
            return self._message(200, "Sign in to the MyMCP console", "Open this link to sign in.")
        token = request.query_params.get("token", "")
        outcome = await to_thread.run_sync(
            lambda: redeem_sign_in(self._directory, token, now=self._clock())
        )
        epoch = read_session_epoch(self._directory) if outcome is Redemption.OK else None
        if outcome is Redemption.OK and epoch is None:
            outcome = Redemption.UNAVAILABLE
        _log.info("console sign_in outcome=%s", outcome.value)
        if outcome is not Redemption.OK or epoch is None:
            heading, line = _SIGN_IN_REFUSALS[outcome]
            return self._message(503 if outcome is Redemption.UNAVAILABLE else 403, heading, line)
        # A browser signing in again is done with the session it had: that cookie must
        # not stay valid (it may have been seen elsewhere) once this one replaces it.
        earlier = self._session(request)
        if earlier is not None:
            self._sessions.close(earlier)
            if self._audit is not None:  # that session ended, as a sign-out ends one
                self._audit.append("console_sign_out", principal="console")
        cookie, _ = self._sessions.open(epoch)
        if self._audit is not None:
            self._audit.append("console_sign_in", principal="console")
        response = RedirectResponse("/console/approvals", status_code=303)
        response.headers.append(
            "set-cookie",
            f"{self._cookie}={cookie}; Max-Age={SESSION_LIFETIME_SECONDS}; Path=/console; "
            "HttpOnly; SameSite=Strict",
        )
        return response

    async def _sign_out(
        self, request: Request, session: ConsoleSession, form: dict[str, str]
    ) -> Response:
        self._sessions.close(session)
        if self._audit is not None:
            self._audit.append("console_sign_out", principal="console")
        response = self._message(
            200, "Signed out", "Run `mymcp console` in your terminal to sign in again."
        )
        response.headers.append(
            "set-cookie", f"{self._cookie}=; Max-Age=0; Path=/console; HttpOnly; SameSite=Strict"
        )
        return response

    async def _static_file(self, request: Request) -> Response:
        found = self._static.get(request.path_params["name"])
        if found is None:
            return self._message(404, "Not found", "There is no such file.")
        body, media_type = found
        return Response(body, media_type=media_type)

    # -- approvals --------------------------------------------------------------------

    async def _approval_list(self, request: Request, session: ConsoleSession) -> Response:
        approvals = self._approvals
        pending = approvals.pending() if approvals is not None else []
        recent = approvals.recent()[:MAX_RECENT_APPROVALS] if approvals is not None else []
        return self._render(
            "approvals.html",
            session=session,
            section="approvals",
            enabled=approvals is not None,
            version=approvals.version if approvals is not None else 0,
            pending=pending_summary(pending),
            recent=recent,
            state_text=STATE_TEXT,
            rfc3339=rfc3339,
        )

    async def _approval_feed(self, request: Request) -> Response:
        if self._session(request) is None:
            return JSONResponse({"error": "signed_out"}, status_code=403)
        approvals = self._approvals
        if approvals is None:
            return JSONResponse({"enabled": False, "version": 0, "pending": []})
        pending = pending_summary(approvals.pending())
        return JSONResponse({"enabled": True, "version": approvals.version, "pending": pending})

    def _find_approval(self, approval_id: str) -> Approval | None:
        if self._approvals is None or not _APPROVAL_ID.fullmatch(approval_id):
            return None
        return self._approvals.get(approval_id)

    async def _approval(
        self, request: Request, session: ConsoleSession, error: str | None = None
    ) -> Response:
        approval = self._find_approval(request.path_params["approval_id"])
        if approval is None:
            return self._message(
                404,
                "No such approval",
                "It may have been dropped by a server restart, or it was never requested. "
                "The client can repeat its call to ask again.",
                session=session,
            )
        detail = await describe(approval, self._memory)
        return self._render(
            "approval.html",
            409 if error else 200,
            session=session,
            section="approvals",
            detail=detail,
            error=error,
        )

    async def _decide(
        self, request: Request, session: ConsoleSession, form: dict[str, str]
    ) -> Response:
        decision = form.get("decision")
        if decision not in ("approve", "deny") or self._approvals is None:
            return self._message(400, "Bad request", "Choose Approve or Deny.", session=session)
        approval_id = request.path_params["approval_id"]
        if self._find_approval(approval_id) is None:
            return await self._approval(request, session)
        try:
            self._approvals.decide(approval_id, approve=decision == "approve")
        except ApprovalError as exc:
            reason = {
                "expired": (
                    "This approval expired before your decision, or newer requests of the "
                    "same caller pushed it out; nothing was decided."
                ),
                "decided": "This approval was already decided; your decision changed nothing.",
            }.get(exc.code, "This approval cannot be decided.")
            return await self._approval(request, session, error=reason)
        return RedirectResponse(f"/console/approvals/{approval_id}", status_code=303)

    # -- memory -----------------------------------------------------------------------

    async def _memory_home(self, request: Request, session: ConsoleSession) -> Response:
        return self._render(
            "memory.html",
            session=session,
            section="memory",
            scopes=self._memory.scopes,
            can_recall=self._memory.can("memory_recall"),
            can_list=self._memory.can("memory_list"),
            search_scopes=self._memory.scopes,
            search_scope="",
            search_namespace="",
            search_text="",
        )

    async def _listing(self, request: Request, session: ConsoleSession) -> Response:
        params = request.path_params
        scope = params["scope"]
        if scope not in self._memory.scopes:
            return self._message(404, "Not found", "There is no such scope.", session=session)
        namespace: str | None = params.get("namespace")
        opened = request.query_params.get("open", "").strip()
        if opened and "collection" not in params:
            # The form of a listing that could not name every namespace (or collection):
            # the one asked for by its id, which the listing then checks like any other.
            target = f"{request.url.path.rstrip('/')}/{quote(opened, safe='')}"
            return RedirectResponse(target, status_code=303)
        collection = params.get("collection", ANY_COLLECTION)
        if collection == _NO_COLLECTION:
            collection = None
        selector = Selector(scope, namespace, collection)
        containers = None
        if collection is ANY_COLLECTION:
            containers = await self._memory.containers(selector)
        cursor = request.query_params.get("cursor") or None
        page = await self._memory.page(selector, cursor)
        done = request.query_params.get("done", "")
        return self._render(
            "listing.html",
            page.http_status(otherwise=409),
            session=session,
            section="memory",
            selector=selector,
            no_collection=collection is None,
            containers=containers,
            page=page,
            cursor=cursor,
            notice=_DONE.get(done),
            can_recall=self._memory.can("memory_recall"),
        )

    async def _search(self, request: Request, session: ConsoleSession) -> Response:
        query = request.query_params
        scope, text = query.get("scope", ""), query.get("q", "").strip()
        namespace = query.get("namespace", "").strip() or None
        outcome = None
        if scope and text:
            outcome = await self._memory.recall(scope, text[:1000], namespace)
        return self._render(
            "search.html",
            200 if outcome is None else outcome.http_status(otherwise=409),
            session=session,
            section="memory",
            scope=scope,
            outcome=outcome,
            search_scopes=self._memory.scopes,
            search_scope=scope,
            search_namespace=namespace or "",
            search_text=text,
        )

    async def _record(self, request: Request, session: ConsoleSession) -> Response:
        reference = reference_from_query(request.query_params)
        if reference is None:
            return self._message(404, "Not found", "No record is named here.", session=session)
        outcome = await self._memory.inspect(reference)
        record = outcome.payload.get("memory") if outcome.ok else None
        return self._render(
            "record.html",
            outcome.http_status(otherwise=404),
            session=session,
            section="memory",
            reference=reference,
            outcome=outcome,
            record=record,
            actions=self._actions_for(record),
            notice=_DONE.get(request.query_params.get("done", "")),
            error=None,
        )

    def _actions_for(self, record: object) -> list[str]:
        """The lifecycle actions that exist and apply to the record's state."""
        if not isinstance(record, Mapping) or record.get("schema_version") != 2:
            return []
        lifecycle = record.get("lifecycle")
        state = lifecycle.get("state") if isinstance(lifecycle, Mapping) else None
        applicable = {"active": ("archive",), "archived": ("restore", "forget")}.get(str(state), ())
        return [a for a in applicable if self._memory.can(LIFECYCLE_ACTIONS[a])]

    async def _confirm(self, request: Request, session: ConsoleSession) -> Response:
        action = request.path_params["action"]
        reference = reference_from_query(request.query_params)
        if action not in LIFECYCLE_ACTIONS or not self._memory.can(LIFECYCLE_ACTIONS[action]):
            return self._message(404, "Not found", "That action is not available.", session=session)
        if reference is None or reference.get("schema_version") != 2:
            return self._message(404, "Not found", "No record is named here.", session=session)
        outcome = await self._memory.inspect(reference)
        record = outcome.payload.get("memory") if outcome.ok else None

        def record_page(status: int, actions: list[str], notice: str | None) -> Response:
            return self._render(
                "record.html",
                status,
                session=session,
                section="memory",
                reference=reference,
                outcome=outcome,
                record=record,
                actions=actions,
                notice=notice,
                error=None,
            )

        if not isinstance(record, Mapping):
            record = None
            return record_page(404 if outcome.ok else outcome.http_status(otherwise=404), [], None)
        actions = self._actions_for(record)
        if action not in actions:
            # A stale or typed link: the record's state has no such step (forget needs an
            # archived record). The record is shown with the steps it does have.
            state = record.get("lifecycle", {}).get("state", "unknown")
            notice = f"{action.capitalize()} does not apply to a record that is {state}."
            return record_page(409, actions, notice)
        heading, label, consequence = _ACTION_TEXT[action]
        return self._render(
            "confirm.html",
            session=session,
            section="memory",
            action=action,
            heading=heading,
            label=label,
            consequence=consequence,
            record=record,
            reference=reference,
        )

    async def _change(
        self, request: Request, session: ConsoleSession, form: dict[str, str]
    ) -> Response:
        action = request.path_params["action"]
        reference = reference_from_query(form)
        revision = form.get("expected_revision", "")
        if (
            action not in LIFECYCLE_ACTIONS
            or reference is None
            or reference.get("schema_version") != 2
            or not (revision.isascii() and revision.isdigit())
            or len(revision) > 12
        ):
            return self._message(400, "Bad request", "The form is incomplete.", session=session)
        outcome = await self._memory.change(action, reference, int(revision))
        if outcome.ok and action == "forget":
            where = "/console/memory/" + "/".join(
                quote(str(part), safe="")
                for part in (
                    reference["scope"],
                    reference["namespace_id"],
                    reference["collection_id"] or _NO_COLLECTION,
                )
            )
            return RedirectResponse(f"{where}?done=forgotten", status_code=303)
        if outcome.ok:
            target = f"/console/memory/record?{reference_query(reference)}&done={outcome.status}"
            return RedirectResponse(target, status_code=303)
        inspected = await self._memory.inspect(reference)
        record = inspected.payload.get("memory") if inspected.ok else None
        return self._render(
            "record.html",
            outcome.http_status(otherwise=409),
            session=session,
            section="memory",
            reference=reference,
            outcome=inspected,
            record=record,
            actions=self._actions_for(record),
            notice=None,
            error=outcome,
        )

    # -- audit ------------------------------------------------------------------------

    async def _audit_page(self, request: Request, session: ConsoleSession) -> Response:
        view = self._audit_view
        if view is None:
            return self._message(
                200,
                "The audit is off",
                "Set schema_version = 8 (the audit is on by default there) to record every call.",
                session=session,
            )
        wanted = AuditFilter.from_query(request.query_params)
        page = await to_thread.run_sync(view.load, wanted)
        return self._render(
            "audit.html",
            session=session,
            section="audit",
            wanted=wanted,
            page=page,
            rows=[readable(record) for record in page.records],
        )


def create_console(
    runtime: HostRuntime,
    dispatcher: Dispatcher,
    *,
    approvals: Approvals | None,
    audit: AuditLog | None,
    address: str,
    port: int,
    state_directory: Path | None,
    clock: Callable[[], float] = time.time,
) -> ConsoleGuard:
    """The console's ASGI app, to be mounted at `/console` of the server at address:port.

    `state_directory` is where `mymcp console` leaves sign-in tokens (None: nobody can
    sign in). Memory tools run through `dispatcher` as the `console` principal.
    """
    tools = {
        tool.origin.local_id: tool.name
        for tool in runtime.registry
        if isinstance(tool.origin, QualifiedCapabilityId)
        and tool.origin.plugin_id == BUNDLED_PLUGIN_ID
    }

    async def call(name: str, arguments: dict[str, Any]) -> Mapping[str, Any] | None:
        tool = runtime.registry.get(name)
        if tool is None:
            return None
        return await dispatcher.execute(Caller(CONSOLE), tool, arguments)

    memory = MemoryBrowser(call, tools, _scopes(runtime, tools.get("memory_list")))
    pages = ConsolePages(
        memory=memory,
        approvals=approvals,
        audit=audit,
        state_directory=state_directory,
        cookie_name=f"mymcp_console_{port}",
        clock=clock,
    )
    binding = TransportOptions.for_binding(address, port)
    return ConsoleGuard(pages.router(), binding.hosts, binding.origins)


def _scopes(runtime: HostRuntime, list_tool: str | None) -> tuple[str, ...]:
    """The scopes `memory_list` accepts, as its published schema names them."""
    tool = runtime.registry.get(list_tool) if list_tool is not None else None
    properties = tool.input_schema.get("properties") if tool is not None else None
    scope = properties.get("scope") if isinstance(properties, Mapping) else None
    values = scope.get("enum") if isinstance(scope, Mapping) else None
    return tuple(str(v) for v in values) if isinstance(values, list) else ()

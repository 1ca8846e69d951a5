"""The operator's governance commands: bearer tokens (`auth token`), `policy explain`,
`audit verify` and `audit show`, and the console's one-time sign-in link."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from mymcp._escaping import escape_invisible
from mymcp.cli.terminal import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, fail
from mymcp.errors import AuditError, Location, MyMCPError


def _verifier_path(explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit.absolute()
    from mymcp.config import load_host_configuration

    return load_host_configuration().authentication.operator_bearer_verifier_path


def _warn_of_subject_spelling(subject: str) -> None:
    """A valid subject that a policy rule is easily written wrong for."""
    if subject != subject.strip():
        print(
            "mymcp: warning: the subject begins or ends with a space, which is part of it: "
            "a policy rule must name it with that space",
            file=sys.stderr,
        )
    if "*" in subject:
        print(
            "mymcp: warning: the subject holds *, which a policy selector reads as a "
            "wildcard: name this subject with \\* in place of each *",
            file=sys.stderr,
        )


def auth_command(args: argparse.Namespace) -> int:
    from mymcp.auth import create_token, list_credentials, revoke_token

    try:
        path = _verifier_path(args.verifier_file)
        if path is None:
            print(
                "mymcp: error: no verifier file: set authentication.operator_bearer."
                "verifier_path in the host configuration or pass --verifier-file",
                file=sys.stderr,
            )
            return EXIT_USAGE
        if args.action == "create":
            token, credential_id = create_token(path, args.subject)
            print(f"credential id: {credential_id}", file=sys.stderr)
            _warn_of_subject_spelling(args.subject)
            if args.verifier_file is not None:
                # A relative --verifier-file is read from the current directory; the
                # configuration takes only an absolute path, so say which file it was.
                print(
                    f"verifier file: {escape_invisible(str(path))} (the server reads the "
                    "file authentication.operator_bearer.verifier_path names)",
                    file=sys.stderr,
                )
            print("The token is shown once; restart the server to use it.", file=sys.stderr)
            print(token)
        elif args.action == "list":
            credentials = list_credentials(path)
            for credential_id, subject in credentials:
                # A subject may hold characters that look like others or none at all.
                print(f"{credential_id}\t{escape_invisible(subject)}")
            if not credentials:  # said on stderr: the listing itself stays empty
                where = "does not exist yet" if not path.exists() else "holds none"
                print(f"mymcp: no credentials: {path} {where}", file=sys.stderr)
        elif not revoke_token(path, args.credential_id):
            print(
                f"mymcp: error: {escape_invisible(str(path))}: no credential has the id "
                f"{escape_invisible(args.credential_id)!r}; `mymcp auth token list` shows them",
                file=sys.stderr,
            )
            return EXIT_FAILURE
        else:
            print("revoked; restart the server for it to take effect", file=sys.stderr)
    except MyMCPError as exc:
        return fail(exc)
    return EXIT_OK


_PRINCIPAL_NAME = re.compile(r"anonymous|local|(operator|oauth):.+")


def policy_command(args: argparse.Namespace) -> int:
    from mymcp.auth import MAX_SCOPES, is_scope_token, is_valid_subject
    from mymcp.config import load_host_configuration, locate_in_configuration, validate_semantics
    from mymcp.governance import Policy
    from mymcp.host import build_runtime
    from mymcp.plugins.mnemosyne import create_mnemosyne, load_mnemosyne_settings

    name: str = args.principal
    kind, _, subject = name.partition(":")
    # Only principals a caller can be: a subject is checked as authentication checks it.
    # A subject may hold `*` (a rule names such a subject with `\*`): here it is the
    # principal's own name, never a pattern.
    valid = _PRINCIPAL_NAME.fullmatch(name)
    if not valid or (subject and not is_valid_subject(subject)):
        print(
            "mymcp: error: --principal must be anonymous, local, operator:<subject> or "
            f"oauth:<sub>, a subject being visible text of at most 256 characters "
            f"(got {name[:300]!r})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.scope and kind != "oauth":
        print("mymcp: error: --scope applies only to oauth:<sub> principals", file=sys.stderr)
        return EXIT_USAGE
    for scope in args.scope:
        if not is_scope_token(scope):
            shown = scope[:140]
            print(f"mymcp: error: --scope {shown!r} is no OAuth scope token", file=sys.stderr)
            return EXIT_USAGE
    scopes = frozenset(args.scope)
    if len(scopes) > MAX_SCOPES:
        # Authentication refuses a token with more: no principal gets this explanation.
        print(
            f"mymcp: error: --scope names {len(scopes)} different scopes: a token with more "
            f"than {MAX_SCOPES} is refused, so give at most {MAX_SCOPES}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        configuration = load_host_configuration()
        validate_semantics(configuration)
        runtime = build_runtime(configuration, create_mnemosyne(load_mnemosyne_settings()))
    except MyMCPError as exc:
        return fail(exc)
    try:
        policy = Policy(configuration.policy, runtime)
    except MyMCPError as exc:
        locate_in_configuration(exc, configuration.source)
        return fail(exc)
    view = policy.view(name, scopes)
    rows = [
        {
            "name": tool,
            "allowed": decision.allowed,
            "via": decision.via,
            "rule": decision.rule,
            "selector": decision.selector,
        }
        for tool, decision in view.decisions.items()
    ]
    order = {tool.name: index for index, tool in enumerate(runtime.registry)}
    rows.sort(key=lambda row: (not row["allowed"], order[str(row["name"])]))
    settings = configuration.policy
    notes = []
    if name == "anonymous" and not configuration.authentication.anonymous_enabled:
        notes.append(
            "anonymous access is off ([authentication] anonymous_enabled = false): "
            "no HTTP request is served as anonymous"
        )
    if args.json:
        document = {
            "principal": name,
            "scopes": sorted(scopes),
            "policy": None if settings is None else {"default": settings.default},
            "tools": rows,
            "notes": notes,
        }
        print(json.dumps(document, indent=2))
        return EXIT_OK
    summary = "none (every tool allowed)"
    if settings is not None:
        summary = f"default {settings.default}, {len(settings.rules)} rule(s)"
    print(f"principal: {name}   scopes: {' '.join(sorted(scopes)) or '(none)'}")
    print(f"policy: {summary}")
    for note in notes:
        print(f"note: {note}")
    for allowed, heading in ((True, "may call"), (False, "may not call")):
        chosen = [row for row in rows if row["allowed"] is allowed]
        print(f"\n{heading}:" + ("" if chosen else " (nothing)"))
        width = max((len(str(row["name"])) for row in chosen), default=0)
        for row in chosen:
            print(f"  {str(row['name']).ljust(width)}  {_reason(row)}")
    return EXIT_OK


def _reason(row: dict[str, Any]) -> str:
    via = row["via"]
    if via == "host":
        return "always allowed"
    if via == "unrestricted":
        return "no [policy]"
    if via == "default":
        return f"policy default ({'allow' if row['allowed'] else 'deny'})"
    return f"policy.rules[{row['rule']}] {via} {row['selector']!r}"


def _audit_path(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit.absolute()
    from mymcp.config import load_host_configuration
    from mymcp.governance import audit_directory

    return audit_directory(load_host_configuration())


_RELATIVE = re.compile(r"([1-9][0-9]{0,5})([mhd])")


def _parse_since(text: str, now: datetime) -> datetime | None:
    relative = _RELATIVE.fullmatch(text)
    if relative is not None:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[relative.group(2)]
        return now - timedelta(**{unit: int(relative.group(1))})
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def audit_command(args: argparse.Namespace) -> int:
    from mymcp.governance import read_records, verify_audit
    from mymcp.governance.audit_format import HEAD_FILE, KEY_FILE, read_head

    try:
        directory = _audit_path(args.directory)
    except MyMCPError as exc:
        return fail(exc)
    if directory.is_symlink():
        # The server refuses such a directory, and so does the reading of HEAD in it:
        # followed, the log would read as one whose HEAD is gone, which is tampering.
        return fail(
            AuditError(
                "audit_unavailable",
                "MyMCP audit directory is not a directory",
                location=Location(source=str(directory)),
                detail="a symlink, which the server refuses too; name the directory it points to",
            )
        )
    if not directory.is_dir():
        print(f"mymcp: error: no audit directory at {directory}", file=sys.stderr)
        return EXIT_FAILURE
    if not _holds_an_audit_log(directory):
        # A mistyped --directory must not read as a verified, empty log.
        print(
            f"mymcp: error: {directory} holds no audit log (no {KEY_FILE}, {HEAD_FILE} or "
            "segment file); a server with [audit] on creates them",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if args.audit_command == "verify":
        result = verify_audit(directory)
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
        if not result.ok:
            print(f"mymcp: audit chain broken: {result.problem}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"ok records={result.records} segments={result.segments} head={result.head_hash}")
        return EXIT_OK
    since = None
    if args.since is not None:
        since = _parse_since(args.since, datetime.now(UTC))
        if since is None:
            print(
                "mymcp: error: --since takes an RFC 3339 time, a date (2026-12-01) "
                "or an age such as 30m, 2h, 7d",
                file=sys.stderr,
            )
            return EXIT_USAGE
    # HEAD before the records: a record a running server adds meanwhile comes after it.
    head = read_head(directory)
    every = list(read_records(directory))
    # `show` reads what is there and skips what it cannot read; a log without the
    # record HEAD names, or without a HEAD, was cut or altered, and must not pass for a
    # quiet one.
    if head is None and every:
        print(
            f"note: {HEAD_FILE} is missing or unreadable, so the end of the log cannot be "
            "checked; it may have been cut or altered: run mymcp audit verify",
            file=sys.stderr,
        )
    elif head is not None and head[0] > 0 and not _holds_record(every, head):
        print(
            f"note: the record HEAD names (seq {head[0]}) is not in the log; it may have "
            "been cut or altered: run mymcp audit verify",
            file=sys.stderr,
        )
    records = [
        record
        for record in every
        if (args.tool is None or record.get("tool") == args.tool)
        and (args.principal is None or record.get("principal") == args.principal)
        and (args.event is None or record.get("event") == args.event)
        and (since is None or _record_time(record) >= since)
    ]
    for field, wanted in (
        ("event", args.event),
        ("tool", args.tool),
        ("principal", args.principal),
    ):
        if wanted is not None and not any(r.get(field) == wanted for r in every):
            # Most likely a misspelling: an empty answer alone would read as "none happened".
            print(escape_invisible(_nothing_names(field, wanted, every)), file=sys.stderr)
    if args.limit is not None:
        records = records[-args.limit :] if args.limit > 0 else []
    for record in records:
        print(json.dumps(record, sort_keys=True) if args.json else _readable(record))
    return EXIT_OK


_NAMED_AT_MOST: Final = 20


def _nothing_names(field: str, wanted: str, records: Sequence[Mapping[str, object]]) -> str:
    """The note for a filter no record matches, naming what the log does hold."""
    present = sorted({str(r[field]) for r in records if r.get(field) is not None})
    named = ", ".join(present[:_NAMED_AT_MOST]) or "none"
    if len(present) > _NAMED_AT_MOST:
        named += f" and {len(present) - _NAMED_AT_MOST} more"
    if field == "event":
        return (
            f"note: no record in the log is a {json.dumps(wanted)} event; its events are: {named}"
        )
    return f"note: no record in the log names the {field} {json.dumps(wanted)}; it names: {named}"


def _holds_record(records: Sequence[Mapping[str, object]], head: tuple[int, str]) -> bool:
    seq, digest = head
    return any(r.get("seq") == seq and r.get("hash") == digest for r in reversed(records))


def _holds_an_audit_log(directory: Path) -> bool:
    from mymcp.governance.audit_format import HEAD_FILE, KEY_FILE

    return any(os.path.lexists(directory / name) for name in (KEY_FILE, HEAD_FILE)) or any(
        directory.glob("segment-*")
    )


def _record_time(record: dict[str, Any]) -> datetime:
    try:
        return datetime.fromisoformat(str(record.get("time", "")).replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


_SHOWN_ELSEWHERE = frozenset(
    {"seq", "time", "event", "principal", "tool", "decision", "outcome", "duration_ms"}
    | {"prev", "hash", "session", "args_digest", "call"}
)


def _readable(record: dict[str, Any]) -> str:
    parts = [str(record.get("time", "?")), f"#{record.get('seq')}", str(record.get("event"))]
    for key in ("principal", "tool"):
        if record.get(key) is not None:
            parts.append(str(record[key]))
    if "decision" in record:
        decision = str(record["decision"])
        if "outcome" in record:
            decision += f" -> {record['outcome']}"
            if record.get("duration_ms") is not None:  # a call refused before it ran has none
                decision += f" ({record['duration_ms']} ms)"
        parts.append(decision)
    extra = {key: value for key, value in record.items() if key not in _SHOWN_ELSEWHERE}
    parts.extend(f"{key}={value}" for key, value in sorted(extra.items()))
    # A principal comes from a token's subject and a record from a file on disk: neither
    # may send the terminal a control sequence.
    return escape_invisible("  ".join(parts))


def console_command(args: argparse.Namespace) -> int:
    import webbrowser

    import httpx

    from mymcp.config import load_host_configuration
    from mymcp.console import SIGN_IN_TTL_SECONDS, console_state_directory, issue_sign_in
    from mymcp.console import sign_out_all as end_console_sessions

    try:
        directory = console_state_directory()
        if args.sign_out_all:
            end_console_sessions(directory)
            print(
                "Signed out every console session; unused sign-in links no longer work.",
                file=sys.stderr,
            )
            return EXIT_OK
        server = load_host_configuration().server
        token = issue_sign_in(directory, now=time.time())
    except MyMCPError as exc:
        return fail(exc)
    host = f"[{server.address}]" if ":" in server.address else server.address
    origin = f"http://{host}:{server.port}"
    url = f"{origin}/console/sign-in?token={token}"
    minutes = SIGN_IN_TTL_SECONDS // 60
    print(
        f"Sign in to the MyMCP console with this link (once, within {minutes} minutes):",
        file=sys.stderr,
    )
    print(url, flush=True)
    try:
        httpx.get(f"{origin}/health", timeout=2.0, trust_env=False)  # loopback, no proxy
    except httpx.HTTPError:
        print(f"note: no server answers at {origin} yet; start it with `mymcp`.", file=sys.stderr)
    if not args.no_browser:
        try:
            opened = webbrowser.open(url)
        except webbrowser.Error:
            opened = False
        if not opened:
            print("No browser could be opened: copy the link into one.", file=sys.stderr)
    return EXIT_OK

"""The command line: every command, subcommand and option, with the help that
describes it. Building it imports nothing beyond the standard library and the log
settings, so `--help` is instant."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from gettext import gettext
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mymcp import __version__
from mymcp._escaping import escape_invisible
from mymcp.logs import LOG_FORMATS, LOG_LEVELS

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

_DESCRIPTION = (
    "MyMCP: a local-first MCP host. Without a command it serves "
    "http://<address>:<port>/mcp from the host configuration "
    "($XDG_CONFIG_HOME/mymcp/config.toml, defaults 127.0.0.1:8000)."
)


SERVING_COMMANDS = frozenset({"serve", "stdio", "check"})
"""The commands (with `mymcp` alone) whose logging defaults come from the host
configuration's `[server]` keys; every other command logs warnings and errors only,
unless the command line or the environment asks for more."""


def logging_options(*, top_level: bool, serving: bool = True) -> argparse.ArgumentParser:
    """`--log-level` and `--log-format`, accepted before or after the command. Their help
    gives the defaults of a `serving` command (which reads `[server]`'s logging keys) or
    of a short one (which logs only warnings unless asked, and never reads them)."""
    options = argparse.ArgumentParser(add_help=False)
    default = None if top_level else argparse.SUPPRESS
    server = "[server] log_level, then info" if serving else "warning"
    options.add_argument(
        "--log-level",
        choices=tuple(LOG_LEVELS),
        default=default,
        help=f"log level (default: MYMCP_LOG_LEVEL, then {server})",
    )
    server = "[server] log_format, then text" if serving else "text"
    options.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=default,
        help=f"log line format (default: MYMCP_LOG_FORMAT, then {server})",
    )
    return options


def _command(
    commands: Any,
    name: str,
    summary: str,
    description: str | None = None,
    *,
    serving: bool = False,
) -> argparse.ArgumentParser:
    """A subcommand listed with `summary`, whose own --help opens with `description` (by
    default the summary as a sentence). Every command and subcommand takes the logging
    options too, so they may come before or after it; only the `serving` ones (`serve`,
    `stdio`, `check`) read their defaults from the host configuration."""
    if description is None:
        description = summary[0].upper() + summary[1:] + "."
    options = logging_options(top_level=False, serving=serving)
    parser = commands.add_parser(name, help=summary, description=description, parents=[options])
    return parser  # type: ignore[no-any-return]


def _positive(text: str) -> int:
    """A count on the command line: a whole number from 1 (argparse says what is wrong)."""
    if not (text.isascii() and text.isdigit() and len(text) <= 9) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1, not {text[:40]!r}")
    return int(text)


def _module_name(text: str) -> str:
    """A module as a `[[plugins]]` entry may name one (argparse says what is wrong)."""
    from mymcp.config import is_module_name

    if not is_module_name(text):
        raise argparse.ArgumentTypeError(
            f"not a module name: {text[:80]!r}; a [[plugins]] module is dot-separated Python "
            "identifiers, as in `import`"
        )
    return text


class _Subcommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """argparse's choice of subcommand, except that the subcommand itself refuses the
    arguments it does not know. argparse hands them up to the top-level parser, whose
    error then shows the usage of `mymcp` instead of the command that was typed:
    `mymcp memory search --scope …` should show how `mymcp memory search` is used."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        # argparse collects the leftovers of every level in one list on the namespace;
        # the ones this subcommand added are those past the list's length before it ran.
        leftovers = argparse._UNRECOGNIZED_ARGS_ATTR
        before = len(getattr(namespace, leftovers, ()))
        super().__call__(parser, namespace, values, option_string)
        unknown = getattr(namespace, leftovers, [])[before:]
        if unknown and isinstance(values, Sequence):
            # The same words argparse's own parse_args uses, from the subcommand's parser,
            # which prints its own usage line and exits with status 2. A subcommand below
            # this one has already refused its own leftovers, so these are this one's.
            message = gettext("unrecognized arguments: %s") % " ".join(unknown)
            self._name_parser_map[values[0]].error(message)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors show the words they quote with invisible and
    control characters escaped (it quotes unknown arguments as they were typed, and a
    terminal would act on an escape sequence among them). Subcommands inherit it, and
    each refuses the arguments it does not know with its own usage (`_Subcommands`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)

    def error(self, message: str) -> NoReturn:
        super().error(escape_invisible(message))

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse drops a failed write of help or the version without a word: on
        # standard output, let it fail, so that the caller says it could not be written,
        # as for any command's output.
        if message and file is not None and file is sys.stdout:
            file.write(message)
        else:
            super()._print_message(message, file)


class _TopParser(_Parser):
    """The `mymcp` parser, which names an option it does not know that comes before the
    command. argparse would read that option's value as the command instead, and answer
    `mymcp --port 9000` with "invalid choice: '9000'", which hides the actual mistake."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        words = list(sys.argv[1:] if args is None else args)
        self._refuse_unknown_leading_option(words)
        return super().parse_known_args(words, namespace)

    def _refuse_unknown_leading_option(self, words: list[str]) -> None:
        takes_value = False
        for word in words:
            if takes_value:
                takes_value = False
                continue
            if word == "--" or not word.startswith("-") or word == "-":
                return  # the command, or no option any more
            name, given, _ = word.partition("=")
            known = [
                action
                for option, action in self._option_string_actions.items()
                if option == name or (name.startswith("--") and option.startswith(name))
            ]
            if not known:
                self.error(gettext("unrecognized arguments: %s") % word)
            takes_value = not given and known[0].nargs != 0


def build_parser() -> argparse.ArgumentParser:
    parser = _TopParser(
        prog="mymcp", description=_DESCRIPTION, parents=[logging_options(top_level=True)]
    )
    parser.add_argument("--version", action="version", version=f"mymcp {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _command(
        commands,
        "serve",
        "serve MCP on the configured loopback address (default)",
        "Serve MCP over HTTP at http://<address>:<port>/mcp, with [server] address and port "
        "from the host configuration (default 127.0.0.1:8000), until interrupted. The "
        "configuration, plugins and credentials are checked first; a fault ends the start "
        "with exit 1 before anything binds. `mymcp` without a command does the same.",
        serving=True,
    )
    _command(
        commands,
        "stdio",
        "serve MCP on stdin/stdout, for clients that start their servers (principal local)",
        "Serve the same tools, policy, approvals and audit over MCP's stdio transport: "
        "one JSON-RPC message per line on stdin and stdout, logs on stderr. The caller "
        "is the principal `local`. The process ends when stdin closes. With [approval] "
        "it also serves the console at the configured address, where approvals are "
        "decided.",
        serving=True,
    )
    _command(
        commands,
        "check",
        "validate configuration, plugins, credentials, Mnemosyne settings and the "
        "memory root; never serves",
        "Compose everything the server would (host configuration, plugins and their "
        "manifests, credentials, policy, Mnemosyne settings, the memory root and its "
        "files) without serving and without creating any file, and print what was found. "
        "A fault is printed with its file, key, line and cause, and exits 1.",
        serving=True,
    )
    plugin = _command(commands, "plugin", "plugin tools").add_subparsers(
        dest="plugin_command", metavar="SUBCOMMAND", required=True
    )
    plugin_check = _command(
        plugin,
        "check",
        "validate one plugin manifest file",
        "Check a plugin manifest exactly as the server does before it imports anything; "
        "with --import, also import the plugin and compare it with its manifest. A tool "
        "id reserved for the host (list_tools, mymcp_*) or for the memory tools (memory_*) "
        "or taken by a Mnemosyne tool fails "
        'the check when the plugin\'s [[plugins]] entry declares binding = "local", as it '
        "fails the start (external_plugin_name_collision), and is a warning when the host "
        "configuration has no entry for the plugin. A namespaced name the host cannot "
        "publish (plugin id mymcp, or more than 128 characters) fails the check unless "
        'the entry declares binding = "local".',
    )
    plugin_check.add_argument(
        "manifest", type=Path, metavar="MANIFEST", help="the plugin's manifest.json"
    )
    plugin_check.add_argument(
        "--import",
        dest="module",
        type=_module_name,
        metavar="MODULE",
        help="also import MODULE as the server would, call its mymcp_plugin_v1() with the "
        "values of its [[plugins]] entry, report every mismatch with the manifest and lint "
        "its tool schemas",
    )
    auth = _command(commands, "auth", "operator credentials").add_subparsers(
        dest="auth_command", metavar="SUBCOMMAND", required=True
    )
    token = _command(
        auth,
        "token",
        "operator bearer tokens",
        "Create, list and revoke the bearer tokens of the operator-bearer-v1 adapter. The "
        "verifier file keeps only digests; the server reads it when it starts.",
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    create = _command(token, "create", "create a token, print it once, store its digest")
    create.add_argument("--subject", required=True, help="who the token authenticates")
    listing = _command(token, "list", "list credential ids and subjects (never secrets)")
    revoke = _command(token, "revoke", "remove one credential by id")
    revoke.add_argument(
        "credential_id", metavar="ID", help="the credential id, as `mymcp auth token list` shows"
    )
    for sub in (create, listing, revoke):
        sub.add_argument(
            "--verifier-file",
            type=Path,
            metavar="FILE",
            help="verifier file to use (default: authentication.operator_bearer.verifier_path)",
        )
    _governance_parsers(commands)
    _console_parser(commands)
    _memory_parser(commands)
    return parser


_SCOPE_HELP = "self, relationship, preference, practice, project, knowledge or agent"
_IDENTIFIER_HELP = "an id of a-z, 0-9, '-' and '_'"


def _memory_parser(commands: Any) -> None:
    """`mymcp memory …`; scope names are checked when the command runs, so building the
    parser never imports the memory package."""
    memory = _command(
        commands,
        "memory",
        "see, search, check, export and import memory (Mnemosyne)",
        "Read the memory root the server uses ($MNEMOSYNE_MEMORY_ROOT or "
        "~/.mnemosyne/memory) from the terminal. Paths are shown: they are yours.",
    ).add_subparsers(dest="memory_command", metavar="SUBCOMMAND", required=True)
    listing = _command(memory, "list", "list the memories of a scope, without content")
    listing.add_argument("scope", metavar="SCOPE", help=_SCOPE_HELP)
    listing.add_argument(
        "--namespace", metavar="N", help=f"only this namespace ({_IDENTIFIER_HELP})"
    )
    narrowing = listing.add_mutually_exclusive_group()
    narrowing.add_argument(
        "--collection",
        metavar="C",
        help=f"only this collection of the namespace ({_IDENTIFIER_HELP}; needs --namespace)",
    )
    narrowing.add_argument(
        "--no-collection",
        action="store_true",
        help="only the namespace's memories outside any collection (needs --namespace)",
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    show = _command(
        memory,
        "show",
        "print one memory: a reference (JSON), a file path, or a path under the root",
    )
    show.add_argument(
        "target",
        metavar="REFERENCE-or-PATH",
        help="a reference exactly as a tool returned it, a record file, or a path as "
        "`memory list` prints it",
    )
    search = _command(memory, "search", "recall: the memories that best match a query")
    search.add_argument("scope", metavar="SCOPE", help=_SCOPE_HELP)
    search.add_argument("query", metavar="QUERY", help="words to look for")
    search.add_argument(
        "--namespace", metavar="N", help=f"only this namespace ({_IDENTIFIER_HELP})"
    )
    search.add_argument("--tags", nargs="+", default=[], metavar="TAG", help="tags to favour")
    search.add_argument("--json", action="store_true", help="print the tool's JSON answer")
    stats = _command(memory, "stats", "records per scope and namespace, archived, bytes")
    stats.add_argument("--json", action="store_true", help="print JSON")
    _command(
        memory,
        "check",
        "name every file the server skips, and why (exit 1 when any)",
        "Check the memory root itself (absolute, a directory or creatable, not writable by "
        "others), then walk it and name every file the server passes over and why: not "
        "JSON, not a record, in the wrong place, a symlink, too large, unsafe permissions, "
        "a duplicate legacy id; and every scope over the candidate limit. Exit 1 when "
        "anything is wrong. Nothing in the memory is changed.",
    )
    export = _command(
        memory,
        "export",
        "write a scope's records as JSON lines to stdout",
        "Write each active and archived record of SCOPE as one JSON line to stdout, for "
        "`memory import`. Legacy (version-1) records are left out, since they have no "
        "namespace to import them into; the closing line on stderr counts them.",
    )
    export.add_argument("scope", metavar="SCOPE", help=_SCOPE_HELP)
    importing = _command(
        memory,
        "import",
        "remember the records of a JSON-lines file (a dry run unless --apply)",
        "Remember each record of FILE (as `memory export` writes them) with the checks of "
        "memory_remember. Without --apply nothing is written and each line says what would "
        "happen. Archived records are left out; an identical memory is kept as it is.",
    )
    importing.add_argument("file", type=Path, metavar="FILE", help="a JSON-lines file")
    importing.add_argument(
        "--apply", action="store_true", help="write the new memories (never overwrites)"
    )


def _console_parser(commands: Any) -> None:
    console = _command(
        commands,
        "console",
        "sign in to the web console (approvals, memory, audit) with a one-time link",
        "Print a one-time sign-in link for the MyMCP console, served by the running "
        "server at http://<address>:<port>/console/, and open it in your browser. The "
        "link works once, within 5 minutes; the console session it opens lasts 8 hours. "
        "Only a person at this terminal can sign in: MCP credentials never open the "
        "console. The link's token is stored only as a SHA-256 digest, in "
        "$XDG_STATE_HOME/mymcp/console (~/.local/state/mymcp/console), which the "
        "server must share.",
    )
    console.add_argument(
        "--no-browser", action="store_true", help="only print the link; do not open a browser"
    )
    console.add_argument(
        "--sign-out-all",
        action="store_true",
        help="end every console session and void unused sign-in links, instead of signing in",
    )


def _governance_parsers(commands: Any) -> None:
    policy = _command(commands, "policy", "tool policy").add_subparsers(
        dest="policy_command", metavar="SUBCOMMAND", required=True
    )
    explain = _command(
        policy,
        "explain",
        "show which tools a principal may call and which rule decided each",
        "Evaluate [policy] for one principal against the configured tools.",
    )
    explain.add_argument(
        "--principal",
        required=True,
        metavar="PRINCIPAL",
        help="anonymous, local, operator:<subject> or oauth:<sub>",
    )
    explain.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="SCOPE",
        help="an OAuth scope the principal's token carries (repeatable; oauth:* only)",
    )
    explain.add_argument("--json", action="store_true", help="print JSON")
    audit = _command(commands, "audit", "security audit log").add_subparsers(
        dest="audit_command", metavar="SUBCOMMAND", required=True
    )
    verify = _command(
        audit,
        "verify",
        "check the hash chain of the audit log (exit 1 naming the first bad record)",
        "Recompute the hash chain of every audit record, segment after segment, and "
        "print the number of records and the head hash; a record that was changed, "
        "removed or reordered is named, with exit 1.",
    )
    show = _command(audit, "show", "print audit records readably")
    show.add_argument(
        "--since",
        metavar="WHEN",
        help="only records at or after WHEN: RFC 3339 time, a date, or 30m / 2h / 7d ago",
    )
    show.add_argument("--tool", metavar="NAME", help="only calls of this public tool name")
    show.add_argument("--principal", metavar="P", help="only this principal (e.g. operator:alice)")
    show.add_argument("--event", metavar="EVENT", help="only this event (tool_call, ...)")
    show.add_argument(
        "--limit", type=_positive, metavar="N", help="only the last N matching records"
    )
    show.add_argument("--json", action="store_true", help="print one JSON record per line")
    for sub in (verify, show):
        sub.add_argument(
            "--directory",
            type=Path,
            help="audit directory (default: [audit] directory, or "
            "$XDG_STATE_HOME/mymcp/audit, ~/.local/state/mymcp/audit without it)",
        )

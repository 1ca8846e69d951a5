"""The console: a local web page where a person approves calls and reviews memory and audit.

Served by the MyMCP server itself under `/console/` (same address and port as `/mcp`).
Only the person at the operator's terminal can sign in: `mymcp console` prints a
one-time sign-in link (see `access`); MCP credentials never open the console. Every
request passes the guard's Host, Origin and same-origin rules, every response carries
strict security headers (`guard`), and memory is read and changed only through the
memory tools, as the audited `console` principal (`memory`).
"""

from mymcp.console.access import (
    SESSION_LIFETIME_SECONDS,
    SIGN_IN_TTL_SECONDS,
    ConsoleStateError,
    Redemption,
    check_console_state_directory,
    console_state_directory,
    issue_sign_in,
    read_session_epoch,
    redeem_sign_in,
    sign_out_all,
)
from mymcp.console.pages import create_console

__all__ = [
    "SESSION_LIFETIME_SECONDS",
    "SIGN_IN_TTL_SECONDS",
    "ConsoleStateError",
    "Redemption",
    "check_console_state_directory",
    "console_state_directory",
    "create_console",
    "issue_sign_in",
    "read_session_epoch",
    "redeem_sign_in",
    "sign_out_all",
]

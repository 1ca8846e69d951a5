"""What every agent is told in the `initialize` result: the core of docs/MANUAL.md.

Clients put `instructions` in the model's context, so an agent knows the safe way to use
the memory tools without reading the manual. It stays short (every conversation pays for
it) and names only tools, arguments and statuses that exist.
"""

from __future__ import annotations

from typing import Final

__all__ = ["SERVER_INSTRUCTIONS"]

SERVER_INSTRUCTIONS: Final = (
    "MyMCP serves Mnemosyne, the user's local memory, and any tools the operator added; "
    "list_tools names every tool served.\n"
    "Reading: memory_recall finds the active memories most relevant to a query in one "
    "scope; memory_list pages through a scope, namespace or collection; memory_inspect "
    "shows one memory in full. Pass each reference exactly as a tool returned it.\n"
    "Changing: memory_remember, memory_revise, memory_archive, memory_restore and "
    "memory_forget exist only if the operator enabled them. Before each such call, show "
    "the user its complete arguments and get approval of that exact call; approval never "
    "covers a retry or a changed argument. Store only what the user said or approved "
    "(origin records which). If a call answers approval_required, show the user its "
    "approval_url and, once they approved there, repeat the identical call.\n"
    "Inspect right before revise, archive, restore or forget and "
    "pass lifecycle.revision as expected_revision. Forget deletes only archived memories, "
    "for good.\n"
    "Never store secrets: passwords, API keys, tokens, private keys, credential-bearing "
    "URLs, card or government numbers. The server's secret check is a safety net, not "
    "permission.\n"
    "Failures are isError results with status, code and message, often a field: fix that "
    "field. After an uncertain status, inspect before retrying; never retry internal_error "
    "in a loop."
)

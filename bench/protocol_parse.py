"""CPU per request of the bounded HTTP protocol alone: parse a request head and body, hand
it to a trivial application, write its answer, over the in-memory transport of
`tests/transport/test_connections.py` (no sockets, no MyMCP application).

    python bench/protocol_parse.py                       # µs of CPU per request
    valgrind --tool=callgrind python bench/protocol_parse.py --requests 1000   # and 3000:
    # the difference of the two totals over 2,000 is the instructions per request
    # add --extra-header to both: the request then carries one header more, and the
    # difference of the two per-request figures is what one header costs

Run from the repository root (it imports the test harness); put another checkout first on
PYTHONPATH to measure that version's protocol with the same harness.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

# The test harness lives in the checkout; appended, so that PYTHONPATH still decides
# which version of MyMCP (and of its harness) is measured.
sys.path.append(str(Path(__file__).resolve().parents[1]))

from mymcp.transport import ConnectionLimits
from tests.transport.test_connections import Held, Server, request

HEAD = (
    "accept: application/json, text/event-stream\r\ncontent-type: application/json\r\n"
    "mcp-protocol-version: 2025-11-25\r\nmcp-session-id: abcdefabcdefabcdefabcdefabcdef\r\n"
)
BODY = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


# What `--extra-header` adds: the length of a stateless request's `Mcp-Name`.
EXTRA = "mcp-name: list_tools\r\n"


async def _answer(count: int, head: str) -> float:
    """CPU seconds per request over `count` requests on one keep-alive connection."""
    connection = Server(Held(holding=False), ConnectionLimits()).connect()
    data = request("/mcp", headers=head, body=BODY)
    started = time.process_time()
    for _ in range(count):
        connection.send(data)
        for _ in range(6):  # let the request's task and its write run
            await asyncio.sleep(0)
    return (time.process_time() - started) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument(
        "--extra-header", action="store_true", help="send one header more with each request"
    )
    args = parser.parse_args()
    head = HEAD + EXTRA if args.extra_header else HEAD
    print(f"{asyncio.run(_answer(args.requests, head)) * 1e6:.2f} us CPU per request")


if __name__ == "__main__":
    main()

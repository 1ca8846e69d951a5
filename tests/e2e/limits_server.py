"""Test-only entry point: the production `mymcp serve` path with one-second read deadlines
(and one second for requests to finish once it is stopping).

`python -m tests.e2e.limits_server` runs exactly what `mymcp` runs (configuration,
composition, authentication, the application, uvicorn with the bounded protocol), so
the connection-limit tests need not wait for the production defaults.
"""

from __future__ import annotations

import sys

from mymcp.cli import serve
from mymcp.transport import ConnectionLimits

SHORT_LIMITS = ConnectionLimits(
    keep_alive_seconds=1,
    header_seconds=1.0,
    body_seconds=1.0,
    max_connections=64,
    shutdown_seconds=1.0,
)

if __name__ == "__main__":
    sys.exit(serve(limits=SHORT_LIMITS))

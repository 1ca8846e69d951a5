"""Transport benchmark: MyMCP `/mcp` against a bare Starlette JSON endpoint, same run.

Starts both servers with uvicorn on free loopback ports (one worker each), then sends
the same number of sequential requests over one keep-alive connection and prints
p50/p95/mean latency and requests per second. Figures are relative: compare MyMCP's
overhead against the baseline measured a moment earlier on the same machine.

    python bench/transport_latency.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.server import READY_MARKER, free_port  # noqa: E402

BASELINE_APP = """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def endpoint(request):
    body = await request.json()
    return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": {}})

app = Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])])
"""

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@contextmanager
def _uvicorn(command: list[str], env: dict[str, str]) -> Iterator[None]:
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if READY_MARKER in line:
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        if not ready.wait(30) or process.poll() is not None:
            raise RuntimeError("server did not start")
        yield
    finally:
        process.terminate()
        process.wait(timeout=15)


def _measure(send: Callable[[int], None], count: int) -> dict[str, float]:
    for warm in range(min(200, count)):
        send(warm)
    samples = []
    started = time.perf_counter()
    for index in range(count):
        t0 = time.perf_counter()
        send(index)
        samples.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - started
    samples.sort()
    return {
        "p50_ms": statistics.median(samples),
        "p95_ms": samples[int(len(samples) * 0.95) - 1],
        "mean_ms": statistics.fmean(samples),
        "rps": count / elapsed,
    }


def _rpc(method: str, request_id: int, params: dict | None = None) -> bytes:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def bench_baseline(count: int) -> dict[str, float]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "baseline_app.py").write_text(BASELINE_APP)
        env = {**os.environ, "PYTHONPATH": tmp}
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "baseline_app:app",
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--log-level",
            "info",
            "--no-access-log",
        ]
        with _uvicorn(command, env), httpx.Client() as client:
            url = f"http://127.0.0.1:{port}/mcp"

            def send(i: int) -> None:
                response = client.post(url, content=_rpc("ping", i), headers=HEADERS)
                response.raise_for_status()

            return _measure(send, count)


def bench_mymcp(count: int) -> dict[str, dict[str, float]]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp, "xdg", "mymcp")
        config.mkdir(parents=True)
        (config / "config.toml").write_text(
            f'schema_version = 1\n[server]\naddress = "127.0.0.1"\nport = {port}\n'
        )
        env = {**os.environ, "HOME": tmp, "XDG_CONFIG_HOME": str(Path(tmp, "xdg"))}
        with _uvicorn([sys.executable, "-m", "mymcp.cli"], env), httpx.Client() as client:
            url = f"http://127.0.0.1:{port}/mcp"
            init = client.post(
                url,
                content=_rpc("initialize", 0, {"protocolVersion": "2025-11-25"}),
                headers=HEADERS,
            )
            session = {
                **HEADERS,
                "mcp-session-id": init.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            results = {}
            for name, method, params in (
                ("ping", "ping", None),
                ("tools/list", "tools/list", None),
                ("tools/call list_tools", "tools/call", {"name": "list_tools", "arguments": {}}),
            ):

                def send(i: int, method: str = method, params: dict | None = params) -> None:
                    response = client.post(url, content=_rpc(method, i, params), headers=session)
                    response.raise_for_status()

                results[name] = _measure(send, count)
            return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    rows = {"baseline starlette ping": bench_baseline(args.requests)}
    rows.update({f"mymcp {k}": v for k, v in bench_mymcp(args.requests).items()})
    print(f"{'case':32} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8} {'req/s':>8}")
    for name, row in rows.items():
        figures = f"{row['p50_ms']:8.3f} {row['p95_ms']:8.3f} {row['mean_ms']:8.3f}"
        print(f"{name:32} {figures} {row['rps']:8.0f}")


if __name__ == "__main__":
    main()

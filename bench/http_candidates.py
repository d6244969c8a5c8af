"""The HTTP libraries considered for warptd's server (issue 14), each serving the same 8-GPU
exposition on loopback: RSS, keep-alive /metrics latency, the slow-client attack, and whether a
silent half request is ever closed (a head timeout of 2 s where the library has one).

    python bench/http_candidates.py

asyncio+h11 is warptd's own server (warptd/http/server.py); aiohttp and uvicorn (h11 protocol)
run minimal apps with their documented limits set as close to warptd's as they allow.

One run on the 2-core CI kind of machine (RSS with the daemon's own imports loaded in each):

    library     | RSS MiB | with 1,200 slow | keep-alive p50/p99 ms | slow: ok, p50/p99 ms | silent closed
    asyncio+h11 | 47.1    | 56.6            | 0.37 / 0.49           | 100, 1.7 / 4.1       | yes (2 s)
    aiohttp     | 56.2    | 63.3            | 0.28 / 0.37           | 100, 1.7 / 5.3       | yes (idle timer)
    uvicorn+h11 | 48.2    | 53.8            | 0.43 / 0.71           | 100, 1.7 / 2.3       | never

Chosen: asyncio with h11. aiohttp is ~0.1 ms faster per scrape but costs 9 MiB more (over the
issue's 5 MiB budget), and has no separate head, body or connection limits; uvicorn never closes
a connection that stays silent before its first request (no head timeout). h11 does the protocol
(parsing, framing, keep-alive, header size) and leaves each limit to warptd, in one small package.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import emit, free_port, get, keepalive_latencies, pct, rss_bytes, stop, wait_http
from slow_clients import attack, open_count, raise_nofile, scrapes

HERE = Path(__file__).resolve().parent
CANDIDATES = ("asyncio+h11", "aiohttp", "uvicorn+h11")
HEAD_TIMEOUT = 2.0


def body() -> bytes:
    """An exposition the size of warptd's at 8 GPUs, made from the NVML double's fields."""
    lines = [b"# HELP warptd_x x\n# TYPE warptd_x gauge\n"]
    for gpu in range(8):
        for metric in range(180):
            lines.append(
                b'warptd_device_metric_%d{backend="nvidia",device="%d",uuid="GPU-%d"} 1.5\n'
                % (metric, gpu, gpu)
            )
    return b"".join(lines)


def serve(name: str, port: int) -> None:
    import warptd.daemon  # noqa: F401  every candidate carries the daemon's imports: the rest is the library
    from warptd.logs import configure_logging

    configure_logging("warning", "json")
    raise_nofile()
    payload = body()
    if name == "asyncio+h11":
        from warptd.http.app import Response, Router
        from warptd.http.limits import HttpLimits
        from warptd.http.server import WarptdHTTPServer

        router = Router()
        router.add("GET", "/metrics", lambda _: Response(200, payload, "text/plain; version=0.0.4"))
        server = WarptdHTTPServer("127.0.0.1", port, router, limits=HttpLimits(header_timeout=HEAD_TIMEOUT))
        server.start().join()
    elif name == "aiohttp":
        from aiohttp import web

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=payload, content_type="text/plain")

        app = web.Application(client_max_size=64 * 1024)
        app.router.add_get("/metrics", metrics)
        # No head timeout in aiohttp: keepalive_timeout also closes a connection silent from the start.
        web.run_app(
            app, host="127.0.0.1", port=port, backlog=1024, keepalive_timeout=HEAD_TIMEOUT, print=None
        )
    else:
        import uvicorn

        async def app(scope: dict, receive: object, send: object) -> None:
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
            )
            await send({"type": "http.response.body", "body": payload})

        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            http="h11",
            loop="asyncio",
            lifespan="off",
            backlog=1024,
            timeout_keep_alive=int(HEAD_TIMEOUT),
            limit_concurrency=4096,
            log_level="warning",
        )
        asyncio.run(uvicorn.Server(config).serve())


def measure(name: str) -> dict[str, object]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", name, str(port)], cwd=HERE.parent)
    try:
        wait_http(port, "/metrics")
        keepalive_latencies(port, 50)
        rss_idle = rss_bytes(proc.pid)
        kept = keepalive_latencies(port, 500)
        with attack(port) as socks:
            ok, times = scrapes(port)
            rss_attacked = rss_bytes(proc.pid)
            time.sleep(HEAD_TIMEOUT + 2)
            still_open = open_count(socks[:1000])
        return {
            "library": name,
            "rss_mib": rss_idle / 2**20,
            "rss_1200_slow_mib": rss_attacked / 2**20,
            "keepalive_p50_ms": pct(kept, 50) * 1e3,
            "keepalive_p99_ms": pct(kept, 99) * 1e3,
            "slow_ok_of_100": ok,
            "slow_p50_ms": pct(times, 50) * 1e3,
            "slow_p99_ms": pct(times, 99) * 1e3,
            "silent_open_after_4s": still_open,
            "status_after": get(port)[0],
        }
    finally:
        stop(proc)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        import importlib.util

        needs = {"aiohttp": "aiohttp", "uvicorn+h11": "uvicorn"}
        missing = [n for n in CANDIDATES if n in needs and importlib.util.find_spec(needs[n]) is None]
        if missing:
            print(f"skipped (pip install aiohttp uvicorn to compare): {', '.join(missing)}")
        rows = [measure(name) for name in CANDIDATES if name not in missing]
        emit(rows, "HTTP library candidates, same 8-GPU body, loopback")

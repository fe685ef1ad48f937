"""What `/metrics` bookkeeping adds to one request: `core.metrics.RouteMetrics` (route template lookup,
in-flight gauge, request counter, latency histogram) around a do-nothing ASGI app, with the capture
proxy's real route table, against the same app bare. Printed per request, in one process and in
multiprocess mode (values in mmap files, what `veri serve proxy --workers N` runs), and the time of
one `/metrics` answer after the run.

    python bench/metrics_overhead.py [--requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["/r/4f1c2d/v1/chat/completions", "/r/4f1c2d/v1/messages", "/control/sessions"]


async def _bare(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def _time(app, proxy_app, requests: int) -> float:
    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        pass

    scopes = [{"type": "http", "method": "POST", "path": path, "app": proxy_app, "headers": []} for path in PATHS]
    started = time.perf_counter()
    for index in range(requests):
        await app(scopes[index % len(scopes)], receive, send)
    return (time.perf_counter() - started) / requests * 1e6


def measure(requests: int) -> str:
    from veri.infra.metrics import MULTIPROCESS_DIR, metrics_payload
    from veri.services.proxy.app import create_app
    from veri.services.proxy.metrics import ProxyMetrics
    from veri.services.proxy.settings import ProxySettings

    proxy_app = create_app(ProxySettings(policy_url="http://127.0.0.1:9", model_dir=Path("unused")))
    metrics = ProxyMetrics()
    instrumented = metrics.routes.middleware(_bare)
    bare = statistics.median(asyncio.run(_time(_bare, proxy_app, requests)) for _ in range(3))
    timed = statistics.median(asyncio.run(_time(instrumented, proxy_app, requests)) for _ in range(3))
    started = time.perf_counter()
    metrics_payload(metrics.registry)
    scrape_ms = (time.perf_counter() - started) * 1e3
    mode = "multiprocess" if MULTIPROCESS_DIR else "one process "
    return (f"{mode}  bare {bare:6.1f} us/request   with RouteMetrics {timed:6.1f} us/request"
            f"   added {timed - bare:5.1f} us   one /metrics answer {scrape_ms:5.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--here", action="store_true", help=argparse.SUPPRESS)  # one mode, in this process
    args = parser.parse_args()
    if args.here:
        print(measure(args.requests), flush=True)
        return
    # Each mode in a fresh interpreter: prometheus-client picks how it stores values at import.
    command = [sys.executable, __file__, "--here", "--requests", str(args.requests)]
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "services"), env.get("PYTHONPATH", "")])
    subprocess.run(command, env=env, check=True)
    with tempfile.TemporaryDirectory(prefix="veri-bench-metrics-") as folder:
        subprocess.run(command, env={**env, "PROMETHEUS_MULTIPROC_DIR": folder}, check=True)


if __name__ == "__main__":
    main()

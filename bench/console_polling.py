"""Does a console left open slow ingest? Ingest latency with and without polling.

``python -m bench.console_polling [--rate R] [--duration S] [--rounds N]``
starts a router on a fresh store and runs the open-loop client
(``bench.openloop``, signed Stripe requests at a fixed rate) ``--rounds``
times each way, alternating: alone, and while a signed-in "browser" asks
for the overview fragment every 0.5 s (ten times what the page's script
does) and the events page every 2 s. Printed: the p50 and p99 of each run
and the medians of each way, and how many console pages were served.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from bench import signing
from bench.api import STRIPE_SECRET
from bench.console_pages import Browser, _config, _free_port, _wait_healthy


class Poller(threading.Thread):
    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.browser = Browser(port)
        self.browser.sign_in()
        self.stop = threading.Event()
        self.pages = 0

    def run(self) -> None:
        tick = 0
        while not self.stop.wait(0.5):
            self.browser.request("GET", "/console/fragments/overview")
            self.pages += 1
            tick += 1
            if tick % 4 == 0:
                self.browser.request("GET", "/console/events")
                self.pages += 1


def load(request_set: Path, port: int, rate: float, duration: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.openloop", "--set", str(request_set),
         "--url", f"http://127.0.0.1:{port}/in/bench-stripe", "--rate", str(rate),
         "--duration", str(duration), "--warmup", "2", "--connections", "32"],
        capture_output=True, text=True, check=True, timeout=duration * 4 + 60,
    )  # fmt: skip
    line = next(x for x in done.stdout.splitlines() if x.startswith("BENCH-JSON "))
    result: dict[str, Any] = json.loads(line[len("BENCH-JSON ") :])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.console_polling", description=__doc__)
    ap.add_argument("--rate", type=float, default=2000)
    ap.add_argument("--duration", type=float, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    port = _free_port()
    runs: dict[str, list[dict[str, float]]] = {"alone": [], "polled": []}
    served = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = root / "router.toml"
        config.write_text(_config(root / "data", port))
        stream = signing.Stream("bench-stripe", "stripe", STRIPE_SECRET)
        count = int(args.rate * (args.duration + 3) * 1.2)
        with (root / "router.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "hookrouter", "serve", "--config", str(config)],
                stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        try:
            _wait_healthy(port, proc)
            for round_ in range(args.rounds):
                for way in ("alone", "polled"):
                    request_set = root / f"set-{round_}-{way}"
                    signing.generate(request_set, [stream], count)
                    poller = Poller(port) if way == "polled" else None
                    if poller is not None:
                        poller.start()
                    result = load(request_set, port, args.rate, args.duration)
                    if poller is not None:
                        poller.stop.set()
                        poller.join()
                        served += poller.pages
                    latency = result["latency_ms"]
                    runs[way].append({"p50": latency["p50"], "p99": latency["p99"]})
                    print(f"round {round_} {way:6s} p50 {latency['p50']:6.2f} ms  "
                          f"p99 {latency['p99']:6.2f} ms", flush=True)  # fmt: skip
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    summary = {
        way: {q: round(statistics.median(r[q] for r in rs), 2) for q in ("p50", "p99")}
        for way, rs in runs.items()
    }
    print(f"medians: {summary}; console pages served while polled: {served}")
    print("BENCH-JSON " + json.dumps({"runs": runs, "medians": summary, "pages": served}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

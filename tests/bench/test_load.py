"""Load generators: wrk replays the signed set byte-exact; the open-loop client keeps its rate."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import stripe

from bench import openloop, signing, wrk

SECRET = "whsec_test_bench_secret"
SAMPLE = (
    'Running 1s test\nBENCH-JSON {"requests":1200,"duration_us":1000000,"bytes":9,'
    '"errors":{"connect":0,"read":1,"write":0,"status":3,"timeout":0},'
    '"latency_us":{"min":50,"max":9000,"mean":800.5,"stdev":10.0,'
    '"p":{"50":700,"75":900,"90":1000,"99":4000,"99.9":8000,"99.99":9000}},'
    '"wraps":0,"sent":1204,"statuses":{"200":1197,"429":3}}\n'
)


def test_wrk_output_is_parsed_into_milliseconds() -> None:
    res = wrk.parse_output(SAMPLE, client_cpu_s=0.5)
    assert res.requests == 1200 and res.rps == pytest.approx(1200.0)
    assert res.latency_ms["p99"] == pytest.approx(4.0)
    assert res.latency_ms["mean"] == pytest.approx(0.8005)
    assert res.errors["status"] == 3 and res.error_count == 4
    assert res.statuses == {"200": 1197, "429": 3}
    with pytest.raises(ValueError):
        wrk.parse_output("no marker here")


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk not installed")
def test_wrk_replays_each_signed_request_once(tmp_path: Path, recording_server: Any) -> None:
    streams = [signing.Stream("acme-stripe", "stripe", SECRET)]
    rs = signing.generate(tmp_path / "set", streams, 60_000)
    res = wrk.run(
        shutil.which("wrk") or "wrk",
        recording_server.url,
        rs,
        connections=2,
        duration_s=1,
        threads=2,
        count_statuses=True,
    )
    seen = recording_server.requests
    assert res.wraps == 0 and res.requests > 50
    assert res.statuses.get("200", 0) >= res.requests - 2
    ids = set()
    for path, headers, body in seen:
        assert path == "/in/acme-stripe"
        event = stripe.Webhook.construct_event(body.decode(), headers["stripe-signature"], SECRET)
        ids.add(event["id"])
    assert len(ids) == len(seen)  # no event id sent twice across wrk's threads


async def test_open_loop_client_keeps_the_offered_rate(
    tmp_path: Path, recording_server: Any
) -> None:
    rs = signing.generate(tmp_path / "set", [signing.Stream("s", "stripe", SECRET)], 200)
    client = openloop.Client(
        "127.0.0.1",
        recording_server.port,
        signing.iter_requests(rs),
        rate=200,
        duration=0.5,
        connections=4,
        warmup=0.1,
    )
    await asyncio.wait_for(client.run(), 20)
    result = client.result()
    assert result["statuses"] == {"200": 100}  # 0.5 s x 200/s after a 0.1 s warm-up
    assert result["errors"] == {"connection": 0, "incomplete": 0}
    lat = result["latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"] < 2000
    assert len(recording_server.requests) == 120
    # due times step by 1/rate, rounded down to the 1 ms release tick
    dues = client.due[:120]
    assert all(b >= a for a, b in itertools.pairwise(dues))
    assert dues[-1] - dues[0] == pytest.approx(119 / 200, abs=0.002)
    records = tmp_path / "records.txt"
    client.save_records(records)
    assert len(records.read_text().splitlines()) == 120
    json.dumps(result)  # the subprocess prints it as JSON

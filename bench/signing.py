"""Pre-signed request files: every request unique, every signature valid.

Signing in the load generator would make Python the bottleneck (the HMAC is
cheap, but building headers and bodies in a Python loop per request costs
far more than the router spends answering it). So a *request set* is
generated right before each run, and wrk (Lua) or the open-loop client only
concatenates pieces:

* ``requests.lua`` / ``requests.json``: templates, one per stream. A template
  is a list of literal strings and field numbers; field ``k`` is the k-th
  tab-separated value of a record.
* ``requests.tsv``: one record per line, ``<template index>\\t<f1>\\t<f2>...``.
* ``meta.json``: count, run id, timestamp, streams.

Every stream here uses three fields: the provider event id, the signing
timestamp and the signature. Ids and timestamps have a fixed width, so each
template's Content-Length is a constant baked into it. The timestamp is the
moment of generation: runs are bounded (well under the 300 s tolerance that
Stripe's SDK and the Standard Webhooks spec use), and the harness configures
longer tolerances itself for the one scenario (flood) that may run longer.

Event ids are ``evt_b<8 scattered hex><run id><12-digit index>``: unique
across runs, and the index lets the isolation scenario join a delivery back
to its send time. The leading hex digits (a hash of run id and index) make
consecutive ids land all over a sorted index, as the random ids of real
senders do (GitHub's and Shopify's delivery UUIDs): with sequential ids the
store's dedup structure saw append-only keys, which hid what a randomly
written index costs (until 2026-12-01 the ids had no scattered part).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import multiprocessing
import os
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

PROVIDERS = ("stripe", "standard")
# Below this many records a process pool costs more than it saves (spawning it).
_POOL_THRESHOLD = 40_000
_CHUNK = 20_000
# Bodies are padded to about this size: the design's measured facts use 1 KB POSTs.
DEFAULT_BODY_BYTES = 1024


@dataclass(frozen=True)
class Stream:
    """One kind of request in a set: a source, its provider, secret and event type."""

    source_id: str
    provider: str  # "stripe" | "standard"
    secret: str
    event_type: str = "invoice.paid"

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"unknown provider {self.provider!r}; expected one of {PROVIDERS}")


@dataclass(frozen=True)
class RequestSet:
    """A generated request set on disk."""

    directory: Path
    count: int
    run_id: str
    timestamp: int
    streams: tuple[Stream, ...]

    @property
    def lua_file(self) -> Path:
        return self.directory / "requests.lua"

    @property
    def records_file(self) -> Path:
        return self.directory / "requests.tsv"

    def event_id(self, index: int) -> str:
        return event_id(self.run_id, index)


def event_id(run_id: str, index: int) -> str:
    """The provider event id of record ``index`` of run ``run_id``."""
    scatter = hashlib.blake2b(f"{run_id}{index}".encode(), digest_size=4).hexdigest()
    return f"evt_b{scatter}{run_id}{index:012d}"


def index_of(event_id_text: str) -> int:
    """The record index inside an id made by :func:`event_id`."""
    return int(event_id_text[-12:])


def _padding(size: int) -> str:
    # Realistic-looking filler: line items of an invoice, as text.
    item = '{"object":"line_item","amount":1999,"currency":"usd","description":"Pro plan"},'
    reps = max(0, size // len(item))
    return "[" + (item * reps).rstrip(",") + "]"


def _body_parts(stream: Stream, body_bytes: int) -> tuple[str, str, str]:
    """(before id, between id and timestamp, after timestamp) of a JSON body."""
    if stream.provider == "stripe":
        head = '{"id":"'
        mid = '","object":"event","api_version":"2024-06-20","created":'
        tail_fixed = (
            f',"type":"{stream.event_type}","livemode":false,"pending_webhooks":1,'
            '"data":{"object":{"object":"invoice","customer":"cus_bench","lines":'
        )
    else:
        head = '{"type":"' + stream.event_type + '","id":"'
        mid = '","timestamp":'
        tail_fixed = ',"data":{"object":"invoice","customer":"cus_bench","lines":'
    used = len(head) + len(mid) + len(tail_fixed) + 30 + 10 + 3
    tail = (
        tail_fixed + _padding(body_bytes - used) + ("}}}" if stream.provider == "stripe" else "}}")
    )
    return head, mid, tail


def _template(stream: Stream, body_bytes: int) -> list[str | int]:
    """Literal pieces and field numbers (1 = id, 2 = timestamp, 3 = signature)."""
    head, mid, tail = _body_parts(stream, body_bytes)
    sample_id = event_id("00000000", 0)
    length = len(head) + len(sample_id) + len(mid) + 10 + len(tail)
    start = f"POST /in/{stream.source_id} HTTP/1.1\r\nHost: bench\r\n"
    if stream.provider == "stripe":
        return [
            start + "User-Agent: Stripe/1.0 (+https://stripe.com/docs/webhooks)\r\n"
            "Content-Type: application/json; charset=utf-8\r\nStripe-Signature: t=",
            2,
            ",v1=",
            3,
            f"\r\nContent-Length: {length}\r\n\r\n{head}",
            1,
            mid,
            2,
            tail,
        ]
    return [
        start + "Content-Type: application/json\r\nwebhook-id: ",
        1,
        "\r\nwebhook-timestamp: ",
        2,
        "\r\nwebhook-signature: v1,",
        3,
        f"\r\nContent-Length: {length}\r\n\r\n{head}",
        1,
        mid,
        2,
        tail,
    ]


def _signer(stream: Stream) -> tuple[bytes, str]:
    if stream.provider == "stripe":
        return stream.secret.encode(), "stripe"
    raw = stream.secret.removeprefix("whsec_")
    return base64.b64decode(raw + "=="), "standard"


def _sign_chunk(args: tuple[list[Stream], int, int, int, str, int]) -> bytes:
    streams, start, stop, stamp, run_id, body_bytes = args
    parts = [_body_parts(s, body_bytes) for s in streams]
    keys = [_signer(s) for s in streams]
    ts = str(stamp)
    out: list[str] = []
    n = len(streams)
    for i in range(start, stop):
        k = i % n
        head, mid, tail = parts[k]
        key, kind = keys[k]
        eid = event_id(run_id, i)
        body = head + eid + mid + ts + tail
        if kind == "stripe":
            sig = hmac.new(key, f"{ts}.{body}".encode(), hashlib.sha256).hexdigest()
        else:
            mac = hmac.new(key, f"{eid}.{ts}.{body}".encode(), hashlib.sha256).digest()
            sig = base64.b64encode(mac).decode()
        out.append(f"{k}\t{eid}\t{ts}\t{sig}\n")
    return "".join(out).encode()


def _lua_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\r", "\\r").replace("\n", "\\n") + '"'


def _write_lua(path: Path, templates: list[list[str | int]], count: int) -> None:
    rows = []
    for tmpl in templates:
        items = [str(p) if isinstance(p, int) else _lua_literal(p) for p in tmpl]
        rows.append("    {" + ", ".join(items) + "},")
    path.write_text(
        "-- generated by bench.signing; do not edit\nreturn {\n  count = "
        + str(count)
        + ",\n  templates = {\n"
        + "\n".join(rows)
        + "\n  },\n}\n"
    )


def generate(
    directory: Path,
    streams: Sequence[Stream],
    count: int,
    *,
    body_bytes: int = DEFAULT_BODY_BYTES,
    timestamp: int | None = None,
    run_id: str | None = None,
    processes: int | None = None,
) -> RequestSet:
    """Write a request set of ``count`` records cycling over ``streams``."""
    if count <= 0 or not streams:
        raise ValueError("need at least one stream and one record")
    directory.mkdir(parents=True, exist_ok=True)
    stamp = int(time.time()) if timestamp is None else timestamp
    rid = run_id or secrets.token_hex(4)
    templates = [_template(s, body_bytes) for s in streams]
    chunks = [
        (list(streams), lo, min(count, lo + _CHUNK), stamp, rid, body_bytes)
        for lo in range(0, count, _CHUNK)
    ]
    workers = processes if processes is not None else min(2, os.cpu_count() or 1)
    with (directory / "requests.tsv").open("wb") as fh:
        if count >= _POOL_THRESHOLD and workers > 1:
            # spawn, not fork: the harness runs a progress-display thread.
            with multiprocessing.get_context("spawn").Pool(workers) as pool:
                for blob in pool.imap(_sign_chunk, chunks):
                    fh.write(blob)
        else:
            for chunk in chunks:
                fh.write(_sign_chunk(chunk))
    _write_lua(directory / "requests.lua", templates, count)
    (directory / "requests.json").write_text(json.dumps({"templates": templates}))
    meta = {
        "count": count,
        "run_id": rid,
        "timestamp": stamp,
        "streams": [asdict(s) for s in streams],
    }
    (directory / "meta.json").write_text(json.dumps(meta, indent=1))
    return RequestSet(directory, count, rid, stamp, tuple(streams))


def load(directory: Path) -> RequestSet:
    """Re-open a request set written by :func:`generate`."""
    meta = json.loads((directory / "meta.json").read_text())
    streams = tuple(Stream(**s) for s in meta["streams"])
    return RequestSet(directory, meta["count"], meta["run_id"], meta["timestamp"], streams)


def iter_requests(request_set: RequestSet) -> Iterator[bytes]:
    """Every request of the set as raw HTTP bytes, in file order (as wrk builds them)."""
    templates = json.loads((request_set.directory / "requests.json").read_text())["templates"]
    with request_set.records_file.open("rb") as fh:
        for line in fh:
            fields = line.rstrip(b"\n").split(b"\t")
            tmpl = templates[int(fields[0])]
            yield b"".join(fields[p] if isinstance(p, int) else p.encode() for p in tmpl)


def split_request(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    """(request line, lower-cased headers, body) of a raw request (for tests and checks)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, body

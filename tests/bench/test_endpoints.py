"""The delivery scenarios' helpers: sink and hanging endpoints, sink logs, waiting for drains."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench.procs import free_port, port_open
from bench.reference.endpoints import read_log
from bench.scenarios._common import SinkLog, post_raw, wait_quiet

REPO = Path(__file__).resolve().parents[2]


def _start(mode: str, port: int, log: Path | None = None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "bench.reference.endpoints", "--port", str(port), "--mode", mode]
    if log:
        argv += ["--log", str(log)]
    proc = subprocess.Popen(argv, cwd=REPO)
    deadline = time.monotonic() + 15
    while not port_open(port):
        assert proc.poll() is None and time.monotonic() < deadline, "endpoint did not start"
        time.sleep(0.05)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)


def test_sink_records_the_provider_event_id_of_each_delivery(tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "sink.log"
    proc = _start("sink", port, log)
    try:
        body = b'{"data":{"id":"evt_b9f8e7d6c0123abcd000000000042"}}'
        raw = (b"POST /t/b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
        before = time.time()
        assert post_raw(port, raw) == 200
        assert post_raw(port, raw.replace(b"evt_b", b"evt_x")) == 200  # no bench id: "-"
    finally:
        _stop(proc)  # flushes the log
    arrivals = read_log(log)
    assert list(arrivals) == ["evt_b9f8e7d6c0123abcd000000000042"]
    assert before <= arrivals["evt_b9f8e7d6c0123abcd000000000042"] <= time.time()
    assert len(log.read_text().splitlines()) == 2


def test_hanging_endpoint_accepts_and_never_answers() -> None:
    port = free_port()
    proc = _start("hang", port)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            with pytest.raises(TimeoutError):
                sock.recv(1)
    finally:
        _stop(proc)


def test_sink_log_counts_complete_lines_incrementally(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    log = SinkLog(path)
    assert log.poll() == 0  # no file yet
    path.write_bytes(b"1700000000.100 /a id1\n1700000000.2")
    assert log.poll() == 1
    with path.open("ab") as fh:
        fh.write(b"00 /a id2\n")
    assert log.poll() == 2
    assert log.times == [1700000000.1, 1700000000.2]
    assert log.mark() == 2


def test_wait_quiet_needs_the_target_and_a_quiet_period() -> None:
    values = iter([1, 2, 3, 3, 3, 3, 3, 3, 3, 3])
    count, drained = wait_quiet(lambda: next(values, 3), target=3, quiet_s=0.5, timeout_s=5)
    assert (count, drained) == (3, True)
    count, drained = wait_quiet(lambda: 1, target=5, quiet_s=0.1, timeout_s=0.6)
    assert (count, drained) == (1, False)

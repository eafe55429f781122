"""Startup failures and a store that runs out of disk, on a real router process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import tomli_w
from tests.e2e.conftest import stripe_event
from tests.support.router import RouterProcess, base_config, free_port


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MiB filesystem (tmpfs), so the disk can really fill up."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path, leave_bytes: int) -> Path:
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with filler.open("wb") as out:
        out.write(b"\0" * max(0, free - leave_bytes))
        out.flush()
        os.fsync(out.fileno())
    return filler


def test_full_disk_answers_503_with_retry_after_and_loses_nothing(
    tmp_path: Path, small_disk: Path, engine: str
) -> None:
    config = base_config(small_disk / "data", 0, engine)
    acked: list[str] = []
    statuses: list[int] = []
    with RouterProcess(tmp_path, config) as router:
        filler = fill(small_disk, leave_bytes=256 * 1024)
        padding = "x" * 30_000
        for _ in range(40):
            body, headers = stripe_event("evt_" + uuid.uuid4().hex, extra={"pad": padding})
            status, reply_headers, data = router.request("POST", "/in/acme-stripe", body, headers)
            statuses.append(status)
            if status == 200:
                acked.append(orjson.loads(data)["id"])
            else:
                assert status == 503, data
                assert orjson.loads(data)["error"] == "store_full"
                assert int(reply_headers["retry-after"]) >= 1
        assert 503 in statuses, "the disk never filled up"
        assert 200 in statuses
        # A load balancer must see it too, even when the probe's own tiny write still fits.
        status, _, data = router.request("GET", "/readyz")
        assert status == 503, data
        assert "full" in orjson.loads(data)["reason"]

        filler.unlink()  # space comes back: the store recovers without a restart
        body, headers = stripe_event("evt_" + uuid.uuid4().hex)
        status, ack = router.post("acme-stripe", body, headers)
        assert status == 200, ack
        assert router.request("GET", "/readyz")[0] == 200
    with RouterProcess(tmp_path, config) as restarted:
        for event_id in [*acked, ack["id"]]:
            assert restarted.admin("GET", f"/events/{event_id}")[0] == 200


def serve(config_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hookrouter", "serve", "--config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_port_in_use_fails_with_a_clear_message(tmp_path: Path) -> None:
    with RouterProcess(tmp_path) as first:
        second = tmp_path / "second.toml"
        second.write_bytes(tomli_w.dumps(base_config(tmp_path / "other", first.port)).encode())
        result = serve(second)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{first.port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_with_invalid_config_exits_2_with_key_paths(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        f'[server]\nlisten = "127.0.0.1:{free_port()}"\n'
        '[[sources]]\nid = "s"\ntenant = "t"\nprovider = "strip"\nsecrets = ["x"]\n'
    )
    result = serve(path)
    assert result.returncode == 2
    assert "sources[0].provider: unknown provider 'strip'" in result.stderr

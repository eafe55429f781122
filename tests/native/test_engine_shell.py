"""The epoll/io_uring engines under the shared HTTP session layer, and the fallbacks."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from hookrouter._native import engine as native
from hookrouter.core.http1 import Request, Response
from hookrouter.errors import EngineUnavailable
from hookrouter.ingress.engine import create_engine
from hookrouter.ingress.native_engine import NativeEngine
from hookrouter.ingress.server import HttpServer
from hookrouter.ingress.session import Reply

pytestmark = pytest.mark.skipif(native is None, reason="native extension not built")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class EchoApp:
    """Answers with the body; ``/later`` answers on a later loop turn (like a group commit)."""

    def handle(self, request: Request, reply: Reply) -> None:
        response = Response(200, b"echo:" + request.body, content_type="text/plain")
        if request.path == "/later":
            asyncio.get_running_loop().call_later(0.001, reply, response)
        else:
            reply(response)


def _post(path: str, body: bytes) -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n%s" % (
        path.encode(),
        len(body),
        body,
    )


async def _read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return await reader.readexactly(length)


async def test_http_through_the_session_layer(backend: str) -> None:
    server = HttpServer(EchoApp())
    engine = create_engine(backend)
    assert isinstance(engine, NativeEngine)
    host, port = await engine.start(server, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(host, port)
    for path in ("/now", "/later", "/now"):
        writer.write(_post(path, b"abc"))
        assert await _read_response(reader) == b"echo:abc"
    # Pipelined, mixing late and immediate answers: order must hold.
    writer.write(b"".join(_post("/later" if i % 2 else "/now", b"%d" % i) for i in range(20)))
    for i in range(20):
        assert await _read_response(reader) == b"echo:%d" % i
    assert engine.stats()["connections"] == 1
    writer.close()
    await writer.wait_closed()
    for _ in range(200):
        if not server.sessions:
            break
        await asyncio.sleep(0.005)
    assert not server.sessions  # connection_lost reached the session layer
    await engine.stop()


async def test_stop_tells_every_session(backend: str) -> None:
    server = HttpServer(EchoApp())
    engine = create_engine(backend)
    host, port = await engine.start(server, "127.0.0.1", 0)
    conns = [await asyncio.open_connection(host, port) for _ in range(5)]
    for _ in range(200):
        if len(server.sessions) == 5:
            break
        await asyncio.sleep(0.005)
    await engine.stop_accepting()
    with pytest.raises(OSError):
        await asyncio.open_connection(host, port)
    await engine.stop()
    assert not server.sessions
    for _, w in conns:
        w.close()


def test_auto_never_picks_io_uring() -> None:
    engine = create_engine("auto")
    assert engine.name == "epoll"


# -- io_uring refused: seccomp in a child process ---------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    sys.path.insert(0, {root!r})
    from tests.support.native_seccomp import deny_io_uring_setup
    deny_io_uring_setup({err})
    from hookrouter.errors import EngineUnavailable
    from hookrouter.ingress.doctor import probe
    from hookrouter.ingress.engine import create_engine
    from hookrouter.ingress.server import HttpServer
    from hookrouter.core.http1 import Response

    class App:
        def handle(self, request, reply):
            reply(Response(200, b"ok"))

    async def main():
        out = {{}}
        try:
            await create_engine("io_uring").start(HttpServer(App()), "127.0.0.1", 0)
            out["io_uring"] = "started"
        except EngineUnavailable as exc:
            out["io_uring"] = exc.message
        auto = create_engine("auto")
        host, port = await auto.start(HttpServer(App()), "127.0.0.1", 0)
        r, w = await asyncio.open_connection(host, port)
        w.write(b"GET / HTTP/1.1\\r\\nhost: x\\r\\n\\r\\n")
        out["auto_status"] = (await r.readline()).decode().strip()
        out["auto_engine"] = auto.name
        w.close()
        await auto.stop()
        report = probe()
        out["setup_errno"] = report.setup_errno
        out["doctor_io_uring"] = report.engines["io_uring"]
        print(json.dumps(out))

    asyncio.run(main())
    """
)


@pytest.mark.parametrize(("err", "words"), [(errno.EPERM, "seccomp"), (errno.ENOSYS, "ENOSYS")])
def test_io_uring_refused_by_seccomp(err: int, words: str) -> None:
    code = CHILD.format(root=ROOT, err=err)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["io_uring"].startswith("engine 'io_uring' unavailable: io_uring_setup")
    assert words in out["io_uring"]
    assert out["auto_engine"] == "epoll" and out["auto_status"] == "HTTP/1.1 200 OK"
    assert out["setup_errno"] == err  # the doctor saw the same refusal
    assert words in out["doctor_io_uring"]


def test_engine_unavailable_without_the_extension() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        from hookrouter.ingress.engine import create_engine
        from hookrouter.errors import EngineUnavailable
        print(create_engine('auto').name)
        try:
            create_engine('io_uring')
        except EngineUnavailable as e:
            print(e.message)
        """
    )
    env = {**os.environ, "HOOKROUTER_NATIVE": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    auto, uring = proc.stdout.strip().splitlines()
    assert auto == "asyncio"
    assert "HOOKROUTER_NATIVE=0" in uring


def test_unknown_native_name_is_refused() -> None:
    from hookrouter.ingress import native_engine

    with pytest.raises(EngineUnavailable):
        native_engine.create("kqueue")

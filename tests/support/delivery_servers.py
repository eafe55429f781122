"""Real HTTP(S) receivers on 127.0.0.1 for delivery tests, plus a throwaway TLS CA.

``Receiver`` is a small asyncio server (httptools request parser) whose
behaviour per request is a function: answer with a status/headers/body,
answer with raw bytes, close, or never answer. It counts connections so
tests can assert keep-alive reuse server-side.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import httptools


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int  # 1-based index of the connection it arrived on


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"ok"
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False  # send "connection: close" and close after
    raw: bytes | None = None  # exact bytes instead of a formatted response
    hang: bool = False  # never answer
    close_after_raw: bool = False
    delay: float = 0.0  # answer after this many seconds (a slow receiver)


Handler = Callable[[Received], Reply]


class _ServerProto(asyncio.Protocol):
    def __init__(self, server: Receiver) -> None:
        self.server = server
        server.connections += 1
        self.index = server.connections
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._url = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.server.open.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.open.discard(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_message_begin(self) -> None:
        self._headers, self._body, self._url = {}, [], b""

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode().lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method().decode()
        req = Received(method, self._url.decode(), self._headers, b"".join(self._body), self.index)
        self.server.requests.append(req)
        reply = self.server.handler(req)
        assert self.transport is not None
        if reply.hang:
            return
        if reply.raw is not None:
            self.transport.write(reply.raw)
            if reply.close_after_raw:
                self.transport.close()
            return
        if reply.delay > 0:
            asyncio.get_running_loop().call_later(reply.delay, self._send, reply)
        else:
            self._send(reply)

    def _send(self, reply: Reply) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        head = [f"HTTP/1.1 {reply.status} X", f"content-length: {len(reply.body)}"]
        head += [f"{k}: {v}" for k, v in reply.headers]
        if reply.close:
            head.append("connection: close")
        self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + reply.body)
        if reply.close:
            self.transport.close()


class ThreadedReceiver:
    """A :class:`Receiver` on its own thread and loop, for tests that drive a
    router process synchronously. ``requests`` may be read from any thread."""

    def __init__(self, handler: Handler | None = None) -> None:
        self.receiver = Receiver(handler)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> ThreadedReceiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.receiver.start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.receiver.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def port(self) -> int:
        return self.receiver.port

    def webhook_ids(self) -> list[str]:
        return [r.headers.get("webhook-id", "") for r in list(self.receiver.requests)]


class Receiver:
    """An HTTP(S) server on 127.0.0.1 with a scripted reply per request."""

    def __init__(self, handler: Handler | None = None) -> None:
        self.handler: Handler = handler or (lambda _req: Reply())
        self.requests: list[Received] = []
        self.connections = 0
        self.open: set[_ServerProto] = set()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> Receiver:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _ServerProto(self), "127.0.0.1", 0, ssl=ssl_context
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def drop_idle_connections(self) -> None:
        """Close every open connection, like a server's keep-alive timeout would."""
        for proto in list(self.open):
            assert proto.transport is not None
            proto.transport.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for proto in list(self.open):
                if proto.transport is not None:
                    proto.transport.abort()
            await self._server.wait_closed()


@dataclass
class ThrowawayCA:
    """A throwaway CA and a leaf certificate for 127.0.0.1 / localhost."""

    ca_pem: Path
    cert_pem: Path
    key_pem: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert_pem, self.key_pem)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_pem))


def make_test_ca(directory: Path, names: tuple[str, ...] = ("localhost",)) -> ThrowawayCA:
    """Generate a CA and a leaf cert (SANs: ``names`` + 127.0.0.1) with ``cryptography``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hookrouter test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    out = ThrowawayCA(directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
    out.ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert_pem.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    out.key_pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return out

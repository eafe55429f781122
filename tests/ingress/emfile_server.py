"""A server for the fd-exhaustion test: the asyncio engine with few file descriptors left.

Prints its port, then one JSON line of engine stats per line read on stdin.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys

import uvloop

from hookrouter.core.http1 import Request, Response
from hookrouter.ingress.asyncio_engine import AsyncioEngine
from hookrouter.ingress.server import HttpServer
from hookrouter.ingress.session import Reply

SPARE_FDS = int(sys.argv[1])


class OkApp:
    def handle(self, request: Request, reply: Reply) -> None:
        reply(Response(200, b"ok", content_type="text/plain"))


async def main() -> None:
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    engine = AsyncioEngine()
    _host, port = await engine.start(HttpServer(OkApp()), "127.0.0.1", 0)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + SPARE_FDS, hard))
    print(port, flush=True)
    while await stdin.readline():
        print(json.dumps(engine.stats()), flush=True)
    await engine.stop()


uvloop.run(main())

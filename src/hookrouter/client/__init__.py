"""A typed Python client for the admin and publish API, sync and asyncio.

::

    from hookrouter.client import Client

    with Client("http://127.0.0.1:9090", token) as api:
        api.put_tenant("acme", {"id": "acme"})
        key = api.create_key("acme", {"name": "backend"}).key
    with Client("http://127.0.0.1:9090", key) as acme:
        acme.publish({"type": "order.paid", "payload": {"id": 7}}, idempotency_key="order-7")

Its methods are generated from the OpenAPI document the router serves
(``hookrouter.client.generate``), one per operation, with the request and
answer types the routes themselves use (``hookrouter.admin.schemas``).
A refusal raises ``ApiError`` (status, reason code, message, issues); no
answer at all raises ``ConnectError``. The standard library only.
"""

from hookrouter.client._api import AsyncClient, Client
from hookrouter.client.transport import ApiError, ConnectError

__all__ = ["ApiError", "AsyncClient", "Client", "ConnectError"]

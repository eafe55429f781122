"""The admin API client's operations, one method each.

Generated from the OpenAPI document by ``python -m hookrouter.client.generate``;
do not edit (``tests/client`` checks that it is current).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hookrouter.admin import schemas
from hookrouter.client.base import AsyncBase, DataList, DataPage, SyncBase
from hookrouter.client.transport import path_part


class Client(SyncBase):
    """Every admin API operation (blocking)."""

    def openapi(self) -> dict[str, Any]:
        """This API's OpenAPI document.

        ``GET /admin/v1/openapi.json``
        """
        return self._call("GET", "/openapi.json", result=dict[str, Any])

    def list_tenants(
        self, *, tenant: str | None = None, limit: int | None = None
    ) -> list[schemas.Tenant]:
        """List tenants, a page at a time by id; every page, in order.

        ``GET /admin/v1/tenants``
        """
        return self._every_page(
            "/tenants", {"tenant": tenant, "limit": limit}, DataPage[schemas.Tenant]
        )

    def create_tenant(self, body: schemas.Tenant | Mapping[str, Any]) -> schemas.Tenant:
        """Create a tenant.

        ``POST /admin/v1/tenants``
        """
        return self._call("POST", "/tenants", body=body, result=schemas.Tenant)

    def get_tenant(self, id: str) -> schemas.Tenant:
        """Read a tenant.

        ``GET /admin/v1/tenants/{id}``
        """
        return self._call("GET", f"/tenants/{path_part(id)}", result=schemas.Tenant)

    def put_tenant(self, id: str, body: schemas.Tenant | Mapping[str, Any]) -> schemas.Tenant:
        """Create or replace a tenant.

        ``PUT /admin/v1/tenants/{id}``
        """
        return self._call("PUT", f"/tenants/{path_part(id)}", body=body, result=schemas.Tenant)

    def update_tenant(self, id: str, body: Mapping[str, Any]) -> schemas.Tenant:
        """Change some fields of a tenant.

        ``PATCH /admin/v1/tenants/{id}``
        """
        return self._call("PATCH", f"/tenants/{path_part(id)}", body=body, result=schemas.Tenant)

    def delete_tenant(self, id: str) -> None:
        """Delete a tenant.

        ``DELETE /admin/v1/tenants/{id}``
        """
        return self._call("DELETE", f"/tenants/{path_part(id)}", result=type(None))

    def list_sources(
        self, *, tenant: str | None = None, limit: int | None = None
    ) -> list[schemas.Source]:
        """List sources, a page at a time by id; every page, in order.

        ``GET /admin/v1/sources``
        """
        return self._every_page(
            "/sources", {"tenant": tenant, "limit": limit}, DataPage[schemas.Source]
        )

    def create_source(self, body: schemas.Source | Mapping[str, Any]) -> schemas.Source:
        """Create a source.

        ``POST /admin/v1/sources``
        """
        return self._call("POST", "/sources", body=body, result=schemas.Source)

    def get_source(self, id: str) -> schemas.Source:
        """Read a source.

        ``GET /admin/v1/sources/{id}``
        """
        return self._call("GET", f"/sources/{path_part(id)}", result=schemas.Source)

    def put_source(self, id: str, body: schemas.Source | Mapping[str, Any]) -> schemas.Source:
        """Create or replace a source.

        ``PUT /admin/v1/sources/{id}``
        """
        return self._call("PUT", f"/sources/{path_part(id)}", body=body, result=schemas.Source)

    def update_source(self, id: str, body: Mapping[str, Any]) -> schemas.Source:
        """Change some fields of a source.

        ``PATCH /admin/v1/sources/{id}``
        """
        return self._call("PATCH", f"/sources/{path_part(id)}", body=body, result=schemas.Source)

    def delete_source(self, id: str) -> None:
        """Delete a source.

        ``DELETE /admin/v1/sources/{id}``
        """
        return self._call("DELETE", f"/sources/{path_part(id)}", result=type(None))

    def list_endpoints(
        self, *, tenant: str | None = None, limit: int | None = None
    ) -> list[schemas.Endpoint]:
        """List endpoints, a page at a time by id; every page, in order.

        ``GET /admin/v1/endpoints``
        """
        return self._every_page(
            "/endpoints", {"tenant": tenant, "limit": limit}, DataPage[schemas.Endpoint]
        )

    def create_endpoint(self, body: schemas.Endpoint | Mapping[str, Any]) -> schemas.Endpoint:
        """Create an endpoint.

        ``POST /admin/v1/endpoints``
        """
        return self._call("POST", "/endpoints", body=body, result=schemas.Endpoint)

    def get_endpoint(self, id: str) -> schemas.Endpoint:
        """Read an endpoint.

        ``GET /admin/v1/endpoints/{id}``
        """
        return self._call("GET", f"/endpoints/{path_part(id)}", result=schemas.Endpoint)

    def put_endpoint(self, id: str, body: schemas.Endpoint | Mapping[str, Any]) -> schemas.Endpoint:
        """Create or replace an endpoint.

        ``PUT /admin/v1/endpoints/{id}``
        """
        return self._call("PUT", f"/endpoints/{path_part(id)}", body=body, result=schemas.Endpoint)

    def update_endpoint(self, id: str, body: Mapping[str, Any]) -> schemas.Endpoint:
        """Change some fields of an endpoint.

        ``PATCH /admin/v1/endpoints/{id}``
        """
        return self._call(
            "PATCH", f"/endpoints/{path_part(id)}", body=body, result=schemas.Endpoint
        )

    def delete_endpoint(self, id: str) -> None:
        """Delete an endpoint.

        ``DELETE /admin/v1/endpoints/{id}``
        """
        return self._call("DELETE", f"/endpoints/{path_part(id)}", result=type(None))

    def test_filter(
        self, id: str, body: schemas.FilterTest | Mapping[str, Any]
    ) -> schemas.FilterTestResult:
        """Would an event like this one reach the endpoint, and if not why.

        ``POST /admin/v1/endpoints/{id}/filter-test``
        """
        return self._call(
            "POST",
            f"/endpoints/{path_part(id)}/filter-test",
            body=body,
            result=schemas.FilterTestResult,
        )

    def list_keys(self, id: str) -> list[schemas.KeyInfo]:
        """List a tenant's API keys.

        ``GET /admin/v1/tenants/{id}/keys``
        """
        return self._call(
            "GET", f"/tenants/{path_part(id)}/keys", result=DataList[schemas.KeyInfo]
        ).data

    def create_key(
        self, id: str, body: schemas.KeyCreate | Mapping[str, Any] | None = None
    ) -> schemas.KeyCreated:
        """Mint an API key for a tenant.

        ``POST /admin/v1/tenants/{id}/keys``
        """
        return self._call(
            "POST", f"/tenants/{path_part(id)}/keys", body=body, result=schemas.KeyCreated
        )

    def revoke_key(self, id: str, key_id: str) -> None:
        """Revoke an API key.

        ``DELETE /admin/v1/tenants/{id}/keys/{key_id}``
        """
        return self._call(
            "DELETE", f"/tenants/{path_part(id)}/keys/{path_part(key_id)}", result=type(None)
        )

    def list_events(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        before: str | None = None,
    ) -> schemas.EventPage:
        """List events, newest first.

        ``GET /admin/v1/events``
        """
        return self._call(
            "GET",
            "/events",
            query={"tenant": tenant, "status": status, "limit": limit, "before": before},
            result=schemas.EventPage,
        )

    def publish(
        self, body: schemas.PublishEvent | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> schemas.Published:
        """Publish an event.

        ``POST /admin/v1/events``
        """
        return self._call(
            "POST",
            "/events",
            body=body,
            headers={"Idempotency-Key": idempotency_key},
            result=schemas.Published,
        )

    def get_event(self, id: str, *, with_body: bool | None = None) -> schemas.Event:
        """Read an event and its deliveries.

        ``GET /admin/v1/events/{id}``
        """
        return self._call(
            "GET", f"/events/{path_part(id)}", query={"body": with_body}, result=schemas.Event
        )

    def find_event(self, source: str, pid: str, *, with_body: bool | None = None) -> schemas.Event:
        """Find an event by the id its provider gave it.

        ``GET /admin/v1/sources/{source}/events/{pid}``
        """
        return self._call(
            "GET",
            f"/sources/{path_part(source)}/events/{path_part(pid)}",
            query={"body": with_body},
            result=schemas.Event,
        )

    def retention(self) -> dict[str, Any]:
        """The retention policy and what its passes did.

        ``GET /admin/v1/retention``
        """
        return self._call("GET", "/retention", result=dict[str, Any])

    def run_retention(self) -> schemas.RetentionRun:
        """Run a pass now.

        ``POST /admin/v1/retention/run``
        """
        return self._call("POST", "/retention/run", result=schemas.RetentionRun)

    def delivery_stats(
        self, *, tenant: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """Queue, credit and spill stats per tenant and endpoint lane.

        ``GET /admin/v1/delivery``
        """
        return self._call(
            "GET", "/delivery", query={"tenant": tenant, "limit": limit}, result=dict[str, Any]
        )

    def breakers(
        self,
        *,
        tripped: bool | None = None,
        tenant: str | None = None,
        after: str | None = None,
        until: str | None = None,
        limit: int | None = None,
    ) -> schemas.Breakers:
        """Endpoints' breakers: all, the tripped ones, or one tenant's.

        ``GET /admin/v1/breakers``
        """
        return self._call(
            "GET",
            "/breakers",
            query={
                "tripped": tripped,
                "tenant": tenant,
                "after": after,
                "until": until,
                "limit": limit,
            },
            result=schemas.Breakers,
        )

    def endpoint_health(self, id: str) -> schemas.EndpointHealth:
        """An endpoint's recent success ratio and latency, its breaker and its history.

        ``GET /admin/v1/endpoints/{id}/health``
        """
        return self._call(
            "GET", f"/endpoints/{path_part(id)}/health", result=schemas.EndpointHealth
        )

    def reset_breaker(self, id: str) -> schemas.BreakerReset:
        """Close a breaker now; parked work resumes.

        ``POST /admin/v1/breakers/{id}/reset``
        """
        return self._call("POST", f"/breakers/{path_part(id)}/reset", result=schemas.BreakerReset)

    def replay(
        self,
        body: schemas.ReplayBody | Mapping[str, Any] | None = None,
        *,
        dry_run: bool | None = None,
    ) -> schemas.ReplayResult:
        """Make dead (or disabled) deliveries pending again.

        ``POST /admin/v1/replay``
        """
        return self._call(
            "POST", "/replay", body=body, query={"dry_run": dry_run}, result=schemas.ReplayResult
        )

    def publish_batch(
        self, body: schemas.PublishBatch | Mapping[str, Any]
    ) -> schemas.PublishedBatch:
        """Publish up to 1000 events at once.

        ``POST /admin/v1/events:batch``
        """
        return self._call("POST", "/events:batch", body=body, result=schemas.PublishedBatch)

    def create_portal_link(self, id: str) -> schemas.PortalLink:
        """Mint a single-use sign-in link to a tenant's portal.

        ``POST /admin/v1/tenants/{id}/portal-links``
        """
        return self._call(
            "POST", f"/tenants/{path_part(id)}/portal-links", result=schemas.PortalLink
        )


class AsyncClient(AsyncBase):
    """Every admin API operation (asyncio)."""

    async def openapi(self) -> dict[str, Any]:
        """This API's OpenAPI document.

        ``GET /admin/v1/openapi.json``
        """
        return await self._call("GET", "/openapi.json", result=dict[str, Any])

    async def list_tenants(
        self, *, tenant: str | None = None, limit: int | None = None
    ) -> list[schemas.Tenant]:
        """List tenants, a page at a time by id; every page, in order.

        ``GET /admin/v1/tenants``
        """
        return await self._every_page(
            "/tenants", {"tenant": tenant, "limit": limit}, DataPage[schemas.Tenant]
        )

    async def create_tenant(self, body: schemas.Tenant | Mapping[str, Any]) -> schemas.Tenant:
        """Create a tenant.

        ``POST /admin/v1/tenants``
        """
        return await self._call("POST", "/tenants", body=body, result=schemas.Tenant)

    async def get_tenant(self, id: str) -> schemas.Tenant:
        """Read a tenant.

        ``GET /admin/v1/tenants/{id}``
        """
        return await self._call("GET", f"/tenants/{path_part(id)}", result=schemas.Tenant)

    async def put_tenant(self, id: str, body: schemas.Tenant | Mapping[str, Any]) -> schemas.Tenant:
        """Create or replace a tenant.

        ``PUT /admin/v1/tenants/{id}``
        """
        return await self._call(
            "PUT", f"/tenants/{path_part(id)}", body=body, result=schemas.Tenant
        )

    async def update_tenant(self, id: str, body: Mapping[str, Any]) -> schemas.Tenant:
        """Change some fields of a tenant.

        ``PATCH /admin/v1/tenants/{id}``
        """
        return await self._call(
            "PATCH", f"/tenants/{path_part(id)}", body=body, result=schemas.Tenant
        )

    async def delete_tenant(self, id: str) -> None:
        """Delete a tenant.

        ``DELETE /admin/v1/tenants/{id}``
        """
        return await self._call("DELETE", f"/tenants/{path_part(id)}", result=type(None))

    async def list_sources(
        self, *, tenant: str | None = None, limit: int | None = None
    ) -> list[schemas.Source]:
        """List sources, a page at a time by id; every page, in order.

        ``GET /admin/v1/sources``
        """
        return await self._every_page(
            "/sources", {"tenant": tenant, "limit": limit}, DataPage[schemas.Source]
        )

    async def create_source(self, body: schemas.Source | Mapping[str, Any]) -> schemas.Source:
        """Create a source.

        ``POST /admin/v1/sources``
        """
        return await self._call("POST", "/sources", body=body, result=schemas.Source)

    async def get_source(self, id: str) -> schemas.Source:
        """Read a source.

        ``GET /admin/v1/sources/{id}``
        """
        return await self._call("GET", f"/sources/{path_part(id)}", result=schemas.Source)

    async def put_source(self, id: str, body: schemas.Source | Mapping[str, Any]) -> schemas.Source:
        """Create or replace a source.

        ``PUT /admin/v1/sources/{id}``
        """
        return await self._call(
            "PUT", f"/sources/{path_part(id)}", body=body, result=schemas.Source
        )

    async def update_source(self, id: str, body: Mapping[str, Any]) -> schemas.Source:
        """Change some fields of a source.

        ``PATCH /admin/v1/sources/{id}``
        """
        return await self._call(
            "PATCH", f"/sources/{path_part(id)}", body=body, result=schemas.Source
        )

    async def delete_source(self, id: str) -> None:
        """Delete a source.

        ``DELETE /admin/v1/sources/{id}``
        """
        return await self._call("DELETE", f"/sources/{path_part(id)}", result=type(None))

    async def list_endpoints(
        self, *, tenant: str | None = None, limit: int | None = None
    ) -> list[schemas.Endpoint]:
        """List endpoints, a page at a time by id; every page, in order.

        ``GET /admin/v1/endpoints``
        """
        return await self._every_page(
            "/endpoints", {"tenant": tenant, "limit": limit}, DataPage[schemas.Endpoint]
        )

    async def create_endpoint(self, body: schemas.Endpoint | Mapping[str, Any]) -> schemas.Endpoint:
        """Create an endpoint.

        ``POST /admin/v1/endpoints``
        """
        return await self._call("POST", "/endpoints", body=body, result=schemas.Endpoint)

    async def get_endpoint(self, id: str) -> schemas.Endpoint:
        """Read an endpoint.

        ``GET /admin/v1/endpoints/{id}``
        """
        return await self._call("GET", f"/endpoints/{path_part(id)}", result=schemas.Endpoint)

    async def put_endpoint(
        self, id: str, body: schemas.Endpoint | Mapping[str, Any]
    ) -> schemas.Endpoint:
        """Create or replace an endpoint.

        ``PUT /admin/v1/endpoints/{id}``
        """
        return await self._call(
            "PUT", f"/endpoints/{path_part(id)}", body=body, result=schemas.Endpoint
        )

    async def update_endpoint(self, id: str, body: Mapping[str, Any]) -> schemas.Endpoint:
        """Change some fields of an endpoint.

        ``PATCH /admin/v1/endpoints/{id}``
        """
        return await self._call(
            "PATCH", f"/endpoints/{path_part(id)}", body=body, result=schemas.Endpoint
        )

    async def delete_endpoint(self, id: str) -> None:
        """Delete an endpoint.

        ``DELETE /admin/v1/endpoints/{id}``
        """
        return await self._call("DELETE", f"/endpoints/{path_part(id)}", result=type(None))

    async def test_filter(
        self, id: str, body: schemas.FilterTest | Mapping[str, Any]
    ) -> schemas.FilterTestResult:
        """Would an event like this one reach the endpoint, and if not why.

        ``POST /admin/v1/endpoints/{id}/filter-test``
        """
        return await self._call(
            "POST",
            f"/endpoints/{path_part(id)}/filter-test",
            body=body,
            result=schemas.FilterTestResult,
        )

    async def list_keys(self, id: str) -> list[schemas.KeyInfo]:
        """List a tenant's API keys.

        ``GET /admin/v1/tenants/{id}/keys``
        """
        return (
            await self._call(
                "GET", f"/tenants/{path_part(id)}/keys", result=DataList[schemas.KeyInfo]
            )
        ).data

    async def create_key(
        self, id: str, body: schemas.KeyCreate | Mapping[str, Any] | None = None
    ) -> schemas.KeyCreated:
        """Mint an API key for a tenant.

        ``POST /admin/v1/tenants/{id}/keys``
        """
        return await self._call(
            "POST", f"/tenants/{path_part(id)}/keys", body=body, result=schemas.KeyCreated
        )

    async def revoke_key(self, id: str, key_id: str) -> None:
        """Revoke an API key.

        ``DELETE /admin/v1/tenants/{id}/keys/{key_id}``
        """
        return await self._call(
            "DELETE", f"/tenants/{path_part(id)}/keys/{path_part(key_id)}", result=type(None)
        )

    async def list_events(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        before: str | None = None,
    ) -> schemas.EventPage:
        """List events, newest first.

        ``GET /admin/v1/events``
        """
        return await self._call(
            "GET",
            "/events",
            query={"tenant": tenant, "status": status, "limit": limit, "before": before},
            result=schemas.EventPage,
        )

    async def publish(
        self, body: schemas.PublishEvent | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> schemas.Published:
        """Publish an event.

        ``POST /admin/v1/events``
        """
        return await self._call(
            "POST",
            "/events",
            body=body,
            headers={"Idempotency-Key": idempotency_key},
            result=schemas.Published,
        )

    async def get_event(self, id: str, *, with_body: bool | None = None) -> schemas.Event:
        """Read an event and its deliveries.

        ``GET /admin/v1/events/{id}``
        """
        return await self._call(
            "GET", f"/events/{path_part(id)}", query={"body": with_body}, result=schemas.Event
        )

    async def find_event(
        self, source: str, pid: str, *, with_body: bool | None = None
    ) -> schemas.Event:
        """Find an event by the id its provider gave it.

        ``GET /admin/v1/sources/{source}/events/{pid}``
        """
        return await self._call(
            "GET",
            f"/sources/{path_part(source)}/events/{path_part(pid)}",
            query={"body": with_body},
            result=schemas.Event,
        )

    async def retention(self) -> dict[str, Any]:
        """The retention policy and what its passes did.

        ``GET /admin/v1/retention``
        """
        return await self._call("GET", "/retention", result=dict[str, Any])

    async def run_retention(self) -> schemas.RetentionRun:
        """Run a pass now.

        ``POST /admin/v1/retention/run``
        """
        return await self._call("POST", "/retention/run", result=schemas.RetentionRun)

    async def delivery_stats(
        self, *, tenant: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """Queue, credit and spill stats per tenant and endpoint lane.

        ``GET /admin/v1/delivery``
        """
        return await self._call(
            "GET", "/delivery", query={"tenant": tenant, "limit": limit}, result=dict[str, Any]
        )

    async def breakers(
        self,
        *,
        tripped: bool | None = None,
        tenant: str | None = None,
        after: str | None = None,
        until: str | None = None,
        limit: int | None = None,
    ) -> schemas.Breakers:
        """Endpoints' breakers: all, the tripped ones, or one tenant's.

        ``GET /admin/v1/breakers``
        """
        return await self._call(
            "GET",
            "/breakers",
            query={
                "tripped": tripped,
                "tenant": tenant,
                "after": after,
                "until": until,
                "limit": limit,
            },
            result=schemas.Breakers,
        )

    async def endpoint_health(self, id: str) -> schemas.EndpointHealth:
        """An endpoint's recent success ratio and latency, its breaker and its history.

        ``GET /admin/v1/endpoints/{id}/health``
        """
        return await self._call(
            "GET", f"/endpoints/{path_part(id)}/health", result=schemas.EndpointHealth
        )

    async def reset_breaker(self, id: str) -> schemas.BreakerReset:
        """Close a breaker now; parked work resumes.

        ``POST /admin/v1/breakers/{id}/reset``
        """
        return await self._call(
            "POST", f"/breakers/{path_part(id)}/reset", result=schemas.BreakerReset
        )

    async def replay(
        self,
        body: schemas.ReplayBody | Mapping[str, Any] | None = None,
        *,
        dry_run: bool | None = None,
    ) -> schemas.ReplayResult:
        """Make dead (or disabled) deliveries pending again.

        ``POST /admin/v1/replay``
        """
        return await self._call(
            "POST", "/replay", body=body, query={"dry_run": dry_run}, result=schemas.ReplayResult
        )

    async def publish_batch(
        self, body: schemas.PublishBatch | Mapping[str, Any]
    ) -> schemas.PublishedBatch:
        """Publish up to 1000 events at once.

        ``POST /admin/v1/events:batch``
        """
        return await self._call("POST", "/events:batch", body=body, result=schemas.PublishedBatch)

    async def create_portal_link(self, id: str) -> schemas.PortalLink:
        """Mint a single-use sign-in link to a tenant's portal.

        ``POST /admin/v1/tenants/{id}/portal-links``
        """
        return await self._call(
            "POST", f"/tenants/{path_part(id)}/portal-links", result=schemas.PortalLink
        )

"""Tenants and sources: list, create, edit as a document, delete (operators only).

Creation and edits are the admin API's POST and PUT, so a document is
checked by the same rules as the API's; its 422 issues come back with their
field paths and are shown beside the field they name. Each source shows the
URL to paste into the provider's dashboard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from hookrouter.admin.api import redact
from hookrouter.admin.entities import EntityService
from hookrouter.console.endpoints import issues_by_field
from hookrouter.console.gateway import ApiError, segment
from hookrouter.console.sampler import Sampler
from hookrouter.console.site import Page, Site
from hookrouter.core.http1 import Response
from hookrouter.store.base import EntityKind
from hookrouter.verify.registry import PROVIDERS

_PLURAL: dict[EntityKind, str] = {
    "tenant": "tenants",
    "source": "sources",
    "endpoint": "endpoints",
}
_FORM_FIELDS: dict[EntityKind, tuple[str, ...]] = {
    "tenant": ("id", "queue_capacity", "max_in_flight"),
    "source": ("id", "tenant", "provider", "secrets"),
    "endpoint": (),
}


def unmask(doc: dict[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with each masked secret the editor sent back unchanged replaced by the stored one.

    The edit form shows secrets as ``redact`` cuts them; saving that text must
    keep the secret, not store the mask in its place.
    """
    masked = redact(stored)
    out = dict(doc)
    for key, value in doc.items():
        if key in masked and value == masked[key] and value != stored[key]:
            out[key] = stored[key]
    return out


async def endpoint_health(page: Page, endpoint_id: str) -> dict[str, Any] | None:
    """The endpoint's recent health and breaker history; None without a delivery engine."""
    try:
        return dict(await page.api("GET", f"/endpoints/{segment(endpoint_id)}/health"))
    except ApiError as exc:
        if exc.status != 404:
            raise
        return None


class EntityPages:
    def __init__(
        self, kind: EntityKind, entities: EntityService, sampler: Sampler | None = None
    ) -> None:
        self._entities = entities
        self._sampler = sampler  # sources: when each last received an event
        self.kind = kind
        self.plural = _PLURAL[kind]

    def register(self, site: Site) -> None:
        site.route("GET", f"/{self.plural}", self.list)
        site.route("POST", f"/{self.plural}", self.create)
        self.register_edit(site)
        site.route("POST", f"/{self.plural}/{{id}}/delete", self.delete)

    def register_edit(self, site: Site) -> None:
        """Only the document editor (endpoints have a page of their own)."""
        site.route("GET", f"/{self.plural}/{{id}}", self.edit_form)
        site.route("POST", f"/{self.plural}/{{id}}", self.save)

    async def list(self, page: Page, **extra: Any) -> Response:
        listed = await page.api_page(self.plural)
        host = page.request.headers.get("host", "127.0.0.1:8080")
        values: dict[str, Any] = {"form": {}, "issues": {}}
        values.update(extra)
        return page.render(
            f"{self.plural}.html",
            title=self.plural.capitalize(),
            items=sorted(listed.items, key=lambda i: i["id"]),
            more=listed.more,
            ingest_base=f"http://{host}/in/",
            providers=sorted(PROVIDERS),
            last_received=self._sampler.last_received if self._sampler else {},
            watching_since=self._sampler.started_at if self._sampler else None,
            **values,
        )

    def _new_doc(self, page: Page) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": page.field("id")}
        if self.kind == "source":
            doc.update(tenant=page.field("tenant"), provider=page.field("provider"))
            doc["secrets"] = [page.field("secret")] if page.field("secret") else []
        for name in ("queue_capacity", "max_in_flight"):
            if page.field(name):
                doc[name] = (
                    int(page.field(name)) if page.field(name).isdigit() else page.field(name)
                )
        return doc

    async def create(self, page: Page) -> Response:
        doc = self._new_doc(page)
        try:
            await page.api("POST", f"/{self.plural}", body=doc)
        except ApiError as exc:
            if exc.status not in (400, 409, 422):
                raise
            issues = issues_by_field(exc, _FORM_FIELDS[self.kind])
            return await self.list(page, form=doc, issues=issues, status=422)
        page.flash(f"{self.kind.capitalize()} {doc['id']} created.")
        return page.redirect(f"/{self.plural}")

    async def edit_form(self, page: Page, **extra: Any) -> Response:
        entity_id = page.params["id"]
        doc = extra.pop("text", None)
        if doc is None:
            stored = await page.api("GET", f"/{self.plural}/{segment(entity_id)}")
            doc = orjson.dumps(stored, option=orjson.OPT_INDENT_2).decode()
        values: dict[str, Any] = {"issues": {}, "health": None}
        if self.kind == "endpoint":
            values["health"] = await endpoint_health(page, entity_id)
        values.update(extra)
        return page.render(
            "entity_edit.html",
            title=f"{self.kind.capitalize()} {entity_id}",
            kind=self.kind,
            plural=self.plural,
            entity_id=entity_id,
            text=doc,
            **values,
        )

    async def save(self, page: Page) -> Response:
        entity_id = page.params["id"]
        text = page.field("document")
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return await self.edit_form(page, text=text, issues={"": [str(exc)]}, status=422)
        if isinstance(doc, dict):
            await page.api("GET", f"/{self.plural}/{segment(entity_id)}")  # 404 unless ours
            doc = unmask(doc, self._entities.get(self.kind, entity_id).doc)
        try:
            await page.api("PUT", f"/{self.plural}/{segment(entity_id)}", body=doc)
        except ApiError as exc:
            if exc.status not in (400, 409, 422):
                raise
            return await self.edit_form(
                page, text=text, issues=issues_by_field(exc, ()), status=exc.status
            )
        page.flash(f"{self.kind.capitalize()} {entity_id} saved.")
        return page.redirect(f"/{self.plural}")

    async def delete(self, page: Page) -> Response:
        entity_id = page.params["id"]
        try:
            await page.api("DELETE", f"/{self.plural}/{segment(entity_id)}")
        except ApiError as exc:
            if exc.status != 409:
                raise
            page.flash(f"Not deleted: {exc.message}")
            return page.redirect(f"/{self.plural}")
        page.flash(f"{self.kind.capitalize()} {entity_id} deleted.")
        return page.redirect(f"/{self.plural}")


__all__ = ["EntityPages", "unmask"]

"""The OpenAPI document: valid OpenAPI 3.1, complete, and true to the validators."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from hookrouter.admin import delivery_routes, publish, retention_routes, schemas
from hookrouter.admin.api import PREFIX, AdminApi
from hookrouter.admin.openapi import build_document
from hookrouter.admin.reference import render
from hookrouter.config.entities import parse_endpoint, parse_source, parse_tenant
from hookrouter.config.server import AdminSettings
from hookrouter.console import portal
from hookrouter.verify.registry import PROVIDERS


def full_api() -> AdminApi:
    """Every route the runtime registers (construction only records them)."""
    api = AdminApi(AdminSettings(token="x" * 16), None, None, None)  # type: ignore[arg-type]
    retention_routes.install(api, None)  # type: ignore[arg-type]
    delivery_routes.install(api, None)  # type: ignore[arg-type]
    publish.install(api, None)  # type: ignore[arg-type]
    portal.install(api, None)  # type: ignore[arg-type]
    return api


def document() -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(build_document(full_api().operations(), PREFIX))
    return doc


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = document()
    assert doc["openapi"] == "3.1.0"
    validate(doc)


def test_every_route_is_in_the_document_with_its_errors_and_security() -> None:
    doc = document()
    ops = full_api().operations()
    listed = {(m.upper(), p) for p, item in doc["paths"].items() for m in item}
    assert listed == {(op.method, PREFIX + op.path) for op in ops}
    error_ref = {"$ref": "#/components/schemas/ErrorBody"}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            public = path.endswith("/openapi.json")
            assert bool(op["security"]) != public, (method, path)
            errors = {s: r for s, r in op["responses"].items() if s >= "400"}
            if not public:
                assert {"401", "403", "404"} <= set(errors), (method, path)
            for answer in errors.values():
                assert answer["content"]["application/json"]["schema"] == error_ref
    assert set(doc["components"]["securitySchemes"]) == {"adminToken", "tenantKey"}
    error = doc["components"]["schemas"]["ErrorBody"]
    assert {"error", "message"} <= set(error["required"])


def test_a_broken_document_is_refused_by_the_validator() -> None:
    """The check can fail: a response without its required description is not OpenAPI."""
    doc = document()
    del doc["paths"][PREFIX + "/tenants"]["get"]["responses"]["200"]["description"]
    with pytest.raises(OpenAPIValidationError):
        validate(doc)


class Recording(dict[str, Any]):
    """A document that notes every key a parser asks for."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.asked: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)


@pytest.mark.parametrize(
    ("kind", "parser", "seed"),
    [
        ("tenant", parse_tenant, {}),
        ("source", parse_source, {"provider": "stripe"}),
        ("endpoint", parse_endpoint, {}),
    ],
)
def test_entity_schemas_declare_exactly_the_keys_the_validators_read(
    kind: str, parser: Any, seed: dict[str, Any]
) -> None:
    doc = Recording(seed)
    parser(doc, "", [])
    read = doc.asked - set(PROVIDERS)  # a source's options sit under its provider's name
    declared = {f.name for f in msgspec.structs.fields(schemas.ENTITY_TYPES[kind])}
    assert declared == read


def test_an_accepted_document_outside_its_schema_is_refused() -> None:
    """``check_shape``: what the validators accept must also fit the published schema."""
    schemas.check_shape("tenant", {"id": "acme", "queue_capacity": 5})
    with pytest.raises(Exception, match="queue_capacity"):
        schemas.check_shape("tenant", {"id": "acme", "queue_capacity": "5"})


def test_the_reference_page_is_rendered_from_the_current_document() -> None:
    page = Path(__file__).parents[2] / "docs" / "admin-api-reference.md"
    expected = render(document())
    assert page.read_text() == expected, (
        "regenerate: curl -s http://<router>/admin/v1/openapi.json | "
        "python -m hookrouter.admin.reference > docs/admin-api-reference.md"
    )

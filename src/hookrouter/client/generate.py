"""Writes ``hookrouter/client/_api.py`` from the admin API's OpenAPI document.

``python -m hookrouter.client.generate < openapi.json > src/hookrouter/client/_api.py``
(formatted by ``ruff format`` when it is installed, as the rest of the code).

One method per operation, in a sync ``Client`` and an ``AsyncClient``, typed
with the same msgspec structs the routes decode and encode
(``hookrouter.admin.schemas``). ``tests/client`` generates it again from the
document the routes declare and compares, so the client cannot drift from
the API: an operation without a name in ``NAMES`` (or a name without its
operation) fails there.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from typing import Any

import msgspec
import orjson

from hookrouter.admin import schemas

# operationId -> the client's method name.
NAMES = {
    "getOpenapiJson": "openapi",
    "getTenants": "list_tenants",
    "postTenants": "create_tenant",
    "getTenantsId": "get_tenant",
    "putTenantsId": "put_tenant",
    "patchTenantsId": "update_tenant",
    "deleteTenantsId": "delete_tenant",
    "getSources": "list_sources",
    "postSources": "create_source",
    "getSourcesId": "get_source",
    "putSourcesId": "put_source",
    "patchSourcesId": "update_source",
    "deleteSourcesId": "delete_source",
    "getEndpoints": "list_endpoints",
    "postEndpoints": "create_endpoint",
    "getEndpointsId": "get_endpoint",
    "putEndpointsId": "put_endpoint",
    "patchEndpointsId": "update_endpoint",
    "postEndpointsIdFilterTest": "test_filter",
    "deleteEndpointsId": "delete_endpoint",
    "getTenantsIdKeys": "list_keys",
    "postTenantsIdKeys": "create_key",
    "deleteTenantsIdKeysKeyid": "revoke_key",
    "getEvents": "list_events",
    "postEvents": "publish",
    "getEventsId": "get_event",
    "getSourcesSourceEventsPid": "find_event",
    "getRetention": "retention",
    "postRetentionRun": "run_retention",
    "getDelivery": "delivery_stats",
    "getBreakers": "breakers",
    "getEndpointsIdHealth": "endpoint_health",
    "postBreakersIdReset": "reset_breaker",
    "postTenantsIdPortalLinks": "create_portal_link",
    "postReplay": "replay",
    "postEventsBatch": "publish_batch",
}
# Query and header parameters whose name is not a good Python name.
_RENAMED = {"body": "with_body", "Idempotency-Key": "idempotency_key"}
_SCALARS = {"string": "str", "integer": "int", "boolean": "bool", "number": "float"}

HEADER = '''"""The admin API client's operations, one method each.

Generated from the OpenAPI document by ``python -m hookrouter.client.generate``;
do not edit (``tests/client`` checks that it is current).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hookrouter.admin import schemas
from hookrouter.client.base import AsyncBase, DataList, DataPage, SyncBase
from hookrouter.client.transport import path_part


'''


class UnnamedOperation(Exception):
    pass


def generate(doc: dict[str, Any]) -> str:
    components = doc["components"]["schemas"]
    ops = [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()]
    missing = sorted({op["operationId"] for _, _, op in ops} - set(NAMES))
    stale = sorted(set(NAMES) - {op["operationId"] for _, _, op in ops})
    if missing or stale:
        raise UnnamedOperation(f"name these in NAMES: {missing}; remove from NAMES: {stale}")
    out = [HEADER]
    for sync in (True, False):
        cls = "Client(SyncBase)" if sync else "AsyncClient(AsyncBase)"
        what = "blocking" if sync else "asyncio"
        out.append(f'class {cls}:\n    """Every admin API operation ({what})."""\n')
        for path, method, op in ops:
            out.append(_method(path, method, op, components, sync=sync))
    return "\n".join(out).rstrip() + "\n"


def _method(
    path: str, method: str, op: dict[str, Any], components: dict[str, Any], *, sync: bool
) -> str:
    name = NAMES[op["operationId"]]
    result, unwrap = _result(op, components)
    paged = result.startswith("DataPage[")
    args: list[str] = ["self"]
    keywords: list[str] = []
    query: list[str] = []
    headers: list[str] = []
    for param in op.get("parameters", []):
        py = _RENAMED.get(param["name"], param["name"])
        if param["in"] == "path":
            args.append(f"{py}: str")
            continue
        if paged and py == "after":
            continue  # the method follows the pages itself (``_every_page``)
        keywords.append(f"{py}: {_scalar(param['schema'], components)} | None = None")
        into = query if param["in"] == "query" else headers
        into.append(f'"{param["name"]}": {py}')
    body = op.get("requestBody")
    if body is not None:
        schema = body["content"]["application/json"]["schema"]
        hint = _body_type(schema)
        args.append(f"body: {hint}" if body["required"] else f"body: {hint} | None = None")
    if keywords:
        args.append("*")
        args.extend(keywords)
    target = re.sub(r"\{(\w+)\}", r"{path_part(\1)}", path.removeprefix("/admin/v1"))
    where = f'f"{target}"' if "{" in target else f'"{target}"'
    if paged:
        invoke = f"self._every_page({where}, {{{', '.join(query)}}}, {result})"
        value = invoke if sync else f"await {invoke}"
        returns = f"list[{result[len('DataPage[') : -1]}]"
    else:
        call = [f'"{method.upper()}"', where]
        if body is not None:
            call.append("body=body")
        if query:
            call.append("query={" + ", ".join(query) + "}")
        if headers:
            call.append("headers={" + ", ".join(headers) + "}")
        call.append(f"result={result}")
        invoke = f"self._call({', '.join(call)})"
        if not sync:
            invoke = f"(await {invoke})" if unwrap else f"await {invoke}"
        value = f"{invoke}.data" if unwrap else invoke
        returns = f"list[{result[len('DataList[') : -1]}]" if unwrap else result
    if returns == "type(None)":
        returns = "None"
    summary = op["summary"].rstrip(".") + ("; every page, in order" if paged else "")
    doc = f'        """{summary}.\n\n        ``{method.upper()} {path}``\n        """\n'
    head = f"    {'def' if sync else 'async def'} {name}({', '.join(args)}) -> {returns}:\n"
    return head + doc + f"        return {value}\n"


def _ref(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[1] if isinstance(ref, str) else None


def _struct(name: str) -> bool:
    return isinstance(getattr(schemas, name, None), type) and issubclass(
        getattr(schemas, name), msgspec.Struct
    )


def _body_type(schema: dict[str, Any]) -> str:
    name = _ref(schema)
    if name is not None:
        if _struct(name):
            return f"schemas.{name} | Mapping[str, Any]"
        entity = name.removesuffix("Put")
        if name.endswith("Put") and _struct(entity):
            return f"schemas.{entity} | Mapping[str, Any]"
    return "Mapping[str, Any]"


def _result(op: dict[str, Any], components: dict[str, Any]) -> tuple[str, bool]:
    """The type the answer decodes to, and whether it is a ``{"data": [...]}`` to unwrap."""
    ok = next(c for c in op["responses"] if c.startswith("2"))
    content = op["responses"][ok].get("content")
    if content is None:
        return "type(None)", False
    schema = content["application/json"]["schema"]
    name = _ref(schema)
    if name is None:
        return "dict[str, Any]", False
    fields = components[name].get("properties", {})
    paged = sorted(fields) == ["data", "next_after"]
    listed = list(fields) == ["data"] or paged
    item = _ref(fields.get("data", {}).get("items", {})) if listed else None
    if item is not None and _struct(item):
        return (
            (f"DataPage[schemas.{item}]", False) if paged else (f"DataList[schemas.{item}]", True)
        )
    if _struct(name):
        return f"schemas.{name}", False
    raise UnnamedOperation(f"no client type for the schema {name!r}")


def _scalar(schema: dict[str, Any], components: dict[str, Any]) -> str:
    name = _ref(schema)
    if name is not None:
        schema = components[name]
    if "enum" in schema:
        return "str"
    return _SCALARS.get(schema.get("type", "string"), "str")


def formatted(source: str, ruff: str | None = None) -> str:
    """``source`` as ``ruff format`` writes it (unchanged without ruff)."""
    ruff = ruff or shutil.which("ruff")
    if ruff is None:
        return source
    run = subprocess.run(
        [ruff, "format", "--stdin-filename", "_api.py", "-"],
        input=source,
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout


def main() -> None:
    sys.stdout.write(formatted(generate(orjson.loads(sys.stdin.buffer.read()))))


if __name__ == "__main__":
    main()

"""The admin API reference page (docs/admin-api-reference.md), rendered from the OpenAPI document.

``python -m hookrouter.admin.reference < openapi.json > docs/admin-api-reference.md``;
a test renders the document the routes declare and compares, so the page
cannot fall behind the API.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

HEADER = """# Admin API reference

Generated from `GET /admin/v1/openapi.json` by `python -m hookrouter.admin.reference`;
do not edit. [admin-api.md](admin-api.md) explains the API; this page lists
every operation and body.
"""


def render(doc: dict[str, Any]) -> str:
    """The Markdown page for an OpenAPI document built by ``admin.openapi``."""
    out = [HEADER]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            by_tag.setdefault(op["tags"][0], []).append((method.upper(), path, op))
    for tag, ops in by_tag.items():
        out.append(f"## {tag}\n")
        for method, path, op in ops:
            out.append(_operation(method, path, op))
    out.append("## Schemas\n")
    for name, schema in doc["components"]["schemas"].items():
        out.append(_schema(name, schema))
    return "\n".join(out)


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    lines = [f"### `{method} {path}`\n", op["summary"] + "."]
    if op.get("description"):
        lines.append(op["description"])
    schemes = [name for option in op["security"] for name in option]
    lines.append(f"\nCredentials: {', '.join(schemes) if schemes else 'none'}.\n")
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required |", "| --- | --- | --- | --- |"]
        lines += [
            f"| `{p['name']}` | {p['in']} | {_type(p['schema'])} | {_yes(p['required'])} |"
            for p in params
        ]
        lines.append("")
    body = op.get("requestBody")
    if body is not None:
        schema = body["content"]["application/json"]["schema"]
        lines.append(f"Body ({'required' if body['required'] else 'optional'}): {_type(schema)}\n")
    lines += ["| status | meaning | body |", "| --- | --- | --- |"]
    for status, answer in op["responses"].items():
        content = answer.get("content", {}).get("application/json")
        kind = _type(content["schema"]) if content else ""
        lines.append(f"| {status} | {answer['description']} | {kind} |")
    return "\n".join(lines) + "\n"


def _schema(name: str, schema: dict[str, Any]) -> str:
    lines = [f"### {name}\n"]
    if schema.get("description"):
        lines.append(schema["description"] + "\n")
    if "enum" in schema:
        lines.append(
            "One of " + ", ".join(f"`{v}`" for v in sorted(schema["enum"], key=str)) + ".\n"
        )
        return "\n".join(lines)
    required = set(schema.get("required", ()))
    lines += ["| field | type | required | notes |", "| --- | --- | --- | --- |"]
    for field, spec in schema.get("properties", {}).items():
        notes = spec.get("description", "")
        if "default" in spec:
            notes = f"{notes} (default `{orjson.dumps(spec['default']).decode()}`)".strip()
        lines.append(f"| `{field}` | {_type(spec)} | {_yes(field in required)} | {notes} |")
    return "\n".join(lines) + "\n"


def _type(schema: dict[str, Any]) -> str:
    """A JSON Schema in a few words, with links to named schemas."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in sorted(schema["enum"], key=str))
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    bounds = [
        f"{word} {schema[key]}"
        for key, word in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"))
        if key in schema
    ]
    if "pattern" in schema:
        bounds.append(f"matching `{schema['pattern']}`")
    return f"{kind} ({', '.join(bounds)})" if bounds else str(kind)


def _yes(flag: bool) -> str:
    return "yes" if flag else ""


def main() -> None:
    sys.stdout.write(render(orjson.loads(sys.stdin.buffer.read())))


if __name__ == "__main__":
    main()

"""HTTP details of the console's pages: security headers, cookies, forms, redirects.

Every HTML answer carries the same Content-Security-Policy: scripts only from
the console's own static files (no inline script, no ``eval``), so a string
from a webhook that slipped past escaping still could not run. Pages are never
cached (they show live state and carry a CSRF token); static files are.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qs, urlencode

from hookrouter.core.http1 import Request, Response
from hookrouter.errors import RequestRejected

HTML = "text/html; charset=utf-8"
# Bigger forms are refused before they are parsed (a form is a few fields).
MAX_FORM_BYTES = 64 * 1024


class BadForm(RequestRejected):
    status = 400
    reason = "bad_form"


def csp(frame_ancestors: Iterable[str] = ()) -> str:
    """The policy for every page; ``frame_ancestors``: origins that may embed it."""
    ancestors = " ".join(frame_ancestors) or "'none'"
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; "
        f"frame-ancestors {ancestors}"
    )


def page_headers(policy: str) -> tuple[tuple[str, str], ...]:
    return (
        ("content-security-policy", policy),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "same-origin"),  # no-referrer would make Origin "null"
        ("cache-control", "no-store"),
    )


def html(
    status: int,
    body: str,
    policy: str,
    extra: tuple[tuple[str, str], ...] = (),
) -> Response:
    return Response(status, body.encode(), HTML, (*page_headers(policy), *extra))


def redirect(location: str, policy: str, extra: tuple[tuple[str, str], ...] = ()) -> Response:
    """303 See Other: after a POST the browser GETs ``location`` (no resubmission)."""
    return Response(303, b"", HTML, (*page_headers(policy), ("location", location), *extra))


def behind_tls(request: Request) -> bool:
    """True when the browser reached us over HTTPS (a TLS-terminating proxy says so)."""
    return request.headers.get("x-forwarded-proto", "").lower() == "https"


def session_cookie(
    name: str, value: str, path: str, *, secure: bool, max_age: int, framed: bool = False
) -> str:
    """A cookie script cannot read, sent only on requests from our own pages.

    ``framed`` (a portal its tenant lets other sites frame, over TLS): sent in
    their frames too, which SameSite=Strict would stop; the CSRF token and the
    Origin check still guard every change.
    """
    same_site = "None" if framed and secure else "Strict"
    parts = [f"{name}={value}", f"Path={path}", "HttpOnly", f"SameSite={same_site}"]
    parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def cookie(request: Request, name: str) -> str | None:
    for part in request.headers.get("cookie", "").split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return None


def form(request: Request) -> dict[str, list[str]]:
    """An ``application/x-www-form-urlencoded`` body; every value of each field."""
    if len(request.body) > MAX_FORM_BYTES:
        raise BadForm(f"form larger than {MAX_FORM_BYTES} bytes")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.body and kind != "application/x-www-form-urlencoded":
        raise BadForm("expected a form (application/x-www-form-urlencoded)")
    try:
        return parse_qs(request.body.decode(), keep_blank_values=True, max_num_fields=200)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadForm(f"unreadable form: {exc}") from exc


def query(request: Request) -> dict[str, str]:
    """The query string's last value per name, blanks dropped (an empty filter is none)."""
    values = parse_qs(request.query, max_num_fields=50)
    return {k: v[-1] for k, v in values.items() if v and v[-1]}


def with_query(path: str, params: dict[str, str]) -> str:
    kept = {k: v for k, v in params.items() if v}
    return f"{path}?{urlencode(kept)}" if kept else path


def same_origin(request: Request) -> bool:
    """A POST's ``Origin``, when the browser sends one, names this very host."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


__all__ = [
    "HTML",
    "BadForm",
    "behind_tls",
    "cookie",
    "csp",
    "form",
    "html",
    "page_headers",
    "query",
    "redirect",
    "same_origin",
    "session_cookie",
    "with_query",
]

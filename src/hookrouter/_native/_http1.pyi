"""Type stub for the HTTP/1.1 fast path (see http1_head.c for the theory of operation)."""

def parse_request(
    data: bytes, start: int, max_header_bytes: int, max_headers: int, max_body: int, /
) -> tuple[str, str, str, dict[str, str], bytes, bool, int] | None: ...
def parse_response(
    data: bytes, max_header_bytes: int, body_cap: int, /
) -> tuple[int, dict[str, str], bytes, bool] | None: ...
def serialize_request(
    method: str,
    target: str,
    host: str,
    headers: list[tuple[str, str]] | tuple[tuple[str, str], ...],
    user_agent: str,
    body: bytes,
    /,
) -> bytes | None: ...
def serialize_response(
    status_line: bytes,
    content_type: str,
    body: bytes,
    date: bytes,
    headers: tuple[tuple[str, str], ...],
    close: bool,
    /,
) -> bytes | None: ...

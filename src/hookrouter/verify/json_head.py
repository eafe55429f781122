"""A JSON body's top-level ``id`` and ``type``, without building the whole document.

Stripe and Standard Webhooks senders put the event id and type at the top of
the body; everything else in it (often kilobytes of nested objects) is the
customer's business. ``orjson.loads`` builds every nested dict, list and
string only for two of them to be read, while msgspec decoding into a
two-field ``Struct`` validates the rest of the document but allocates nothing
for it (figures in docs/performance.md, "Verification"). The syntax accepted
is the same (strict JSON, UTF-8, no trailing
data); one difference: an integer beyond 64 bits stays an integer here,
where orjson turns it into a float.

Kept out of the mypyc-compiled modules: a ``msgspec.Struct`` subclass cannot
be a mypyc native class. The function itself lives with the compiled
verifiers (``_common.json_head``), which call the decoder directly: an
interpreted wrapper around one C call cost a Python frame per event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec


class _Head(msgspec.Struct):
    # ``object``: any JSON value; a wrong type must not fail the other field.
    id: object = None
    type: object = None


DECODE_HEAD: Final[Callable[[bytes], _Head]] = msgspec.json.Decoder(_Head).decode
"""Decode a body into its top-level ``id`` and ``type`` (``msgspec.DecodeError`` if not JSON)."""

__all__ = ["DECODE_HEAD"]

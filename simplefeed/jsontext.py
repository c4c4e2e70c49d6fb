"""Compact JSON text from values that hold no cycles, with each writer built once.

``json.JSONEncoder.encode`` builds its C encoder on every call. For a short value that is a
third of the cost. A writer from :func:`writer` builds it once. It checks no cycles, because
its values come from decoded JSON or from the model's own records, which cannot hold any.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring,
    encode_basestring_ascii,
)
from typing import Any

__all__ = ["string_writer", "writer"]


def writer(
    *, ensure_ascii: bool = True, sort_keys: bool = False, allow_nan: bool = True
) -> Callable[[Any], str]:
    """A function that writes a value as ``json.dumps(value, separators=(",", ":"), ...)`` would.

    It raises ValueError for NaN or an infinity when ``allow_nan`` is false, as json does.
    """
    fallback = json.JSONEncoder(
        ensure_ascii=ensure_ascii,
        sort_keys=sort_keys,
        allow_nan=allow_nan,
        check_circular=False,
        separators=(",", ":"),
    )
    if c_make_encoder is None:  # Python built without the _json accelerator
        return fallback.encode
    strings = encode_basestring_ascii if ensure_ascii else encode_basestring
    encode = c_make_encoder(
        None, fallback.default, strings, None, ":", ",", sort_keys, False, allow_nan
    )

    def write(value: Any) -> str:
        return "".join(encode(value, 0))

    return write


def string_writer(*, ensure_ascii: bool = True) -> Callable[[str], str]:
    """A function that writes a string as a JSON string, quoted, as :func:`writer`'s do."""
    write: Callable[[str], str] = encode_basestring_ascii if ensure_ascii else encode_basestring
    return write

"""Producer tokens: minting, checking and revoking them.

Reading is public. Every publish needs a token. A token reads ``sft_<id>_<secret>``. The id
finds the row. The secret is checked against the stored SHA-256 with a constant-time
comparison. Secrets are 256 random bits, so there is nothing to brute-force. So a plain hash is
enough, and no slow KDF is needed. The token is shown once and never stored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from simplefeed.errors import Forbidden, Unauthorized
from simplefeed.model import TokenRecord

PREFIX = "sft"
_TOKEN = re.compile(r"^sft_([1-9][0-9]{0,9})_([A-Za-z0-9_-]{43})\Z")
#: tokens.id is an INTEGER column: 32 bits on PostgreSQL. A larger id names no token.
MAX_TOKEN_ID = 2**31 - 1


#: A token's label, a note to recognise it by. It is one field of a line of ``token list``.
MAX_LABEL_CHARS = 200
#: What a label may not hold. It may not hold C0 and C1 controls, tab and line breaks among
#: them, nor DEL. Nor may it hold the Unicode line and paragraph separators. Nor may it hold
#: the replacement character, which marks text decoded with the wrong charset.
_NOT_IN_LABEL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ufffd]")


def label_problem(label: str) -> str | None:
    """Say why ``label`` cannot be a token's label, or None."""
    if not label.strip():
        return "is blank"
    bad = _NOT_IN_LABEL.search(label)
    if bad:
        return f"contains U+{ord(bad.group()):04X}: a label is one line of text"
    if len(label) > MAX_LABEL_CHARS:
        return f"is longer than {MAX_LABEL_CHARS} characters"
    return None


def new_secret() -> str:
    return secrets.token_urlsafe(32)  # 43 characters.


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def format_token(token_id: int, secret: str) -> str:
    return f"{PREFIX}_{token_id}_{secret}"


@dataclass(frozen=True)
class Credentials:
    token_id: int
    secret: str


def parse_authorization(header: str | None) -> Credentials:
    """Return the bearer token of an ``Authorization`` header (RFC 6750).

    Raises :class:`Unauthorized` when there is none.
    """
    if not header:
        raise Unauthorized("publishing needs Authorization: Bearer <token>")
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthorized("publishing needs Authorization: Bearer <token>")
    match = _TOKEN.match(value.strip())
    if match is None or int(match.group(1)) > MAX_TOKEN_ID:
        raise Unauthorized("the bearer token is not valid", invalid_token=True)
    return Credentials(int(match.group(1)), match.group(2))


def check(credentials: Credentials, record: TokenRecord | None, feed: str) -> None:
    """Raise unless ``record`` is the live token for ``credentials`` and allows ``feed``."""
    expected = record.secret_hash if record is not None else "0" * 64
    # Compare even when the id is unknown, so timing says nothing about which ids exist.
    matches = hmac.compare_digest(hash_secret(credentials.secret), expected)
    if record is None or not matches or record.revoked_us is not None:
        raise Unauthorized("the bearer token is not valid", invalid_token=True)
    if record.feed is not None and record.feed != feed:
        raise Forbidden(feed)

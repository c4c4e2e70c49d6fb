"""Producer tokens: only a hash of each secret is stored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, Select, bindparam, select, update

from simplefeed.store.db import Database
from simplefeed.store.tables import feeds, tokens


@dataclass(frozen=True)
class TokenRecord:
    id: int
    secret_hash: str
    feed: str | None
    label: str | None
    created_us: int
    revoked_us: int | None


def _record(row: Row[tuple[object, ...]]) -> TokenRecord:
    return _record_from(row._mapping)


def _record_from(m: Mapping[Any, Any]) -> TokenRecord:
    return TokenRecord(
        id=m["id"],
        secret_hash=m["secret_hash"],
        feed=m["feed_name"],
        label=m["label"],
        created_us=m["created_us"],
        revoked_us=m["revoked_us"],
    )


def _select() -> Select[Any]:
    return select(tokens, feeds.c.name.label("feed_name")).outerjoin(
        feeds, feeds.c.id == tokens.c.feed_id
    )


_GET = _select().where(tokens.c.id == bindparam("token_id"))


def insert_token(
    conn: Connection, *, secret_hash: str, feed_id: int | None, label: str | None, now_us: int
) -> int:
    result = conn.execute(
        tokens.insert().values(
            secret_hash=secret_hash, feed_id=feed_id, label=label, created_us=now_us
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    token_id: int = key[0]
    return token_id


def find_token(db: Database, token_id: int) -> TokenRecord | None:
    """:func:`get_token` outside any transaction, on the database's direct lookup path (every
    publish request makes this lookup first; see :meth:`Database.lookup`)."""
    row = db.lookup(_GET, {"token_id": token_id})
    return None if row is None else _record_from(row)


def get_token(conn: Connection, token_id: int) -> TokenRecord | None:
    row = conn.execute(_GET, {"token_id": token_id}).first()
    return None if row is None else _record(row)


def list_tokens(conn: Connection) -> list[TokenRecord]:
    return [_record(r) for r in conn.execute(_select().order_by(tokens.c.id))]


def revoke_token(conn: Connection, token_id: int, now_us: int) -> bool:
    result = conn.execute(
        update(tokens)
        .where(tokens.c.id == token_id, tokens.c.revoked_us.is_(None))
        .values(revoked_us=now_us)
    )
    return result.rowcount == 1

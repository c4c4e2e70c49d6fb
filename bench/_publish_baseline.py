"""The ceiling for publishing on this machine, a minimal falcon app for bench/publish.py.

It does the least a publish must do. It parses the JSON body, and inserts it in its own write
transaction, one row per event. It uses SQLAlchemy Core on the very engine Simplefeed uses
(``simplefeed.store.open_store``). So the pool, the SQLite pragmas, ``BEGIN IMMEDIATE`` and the
PostgreSQL settings are the same. The uWSGI server runs it with the project's ``uwsgi.ini``, and
the benchmark swaps only the ``module`` line. So socket, processes, lazy-apps and headers are
the same as the service's. It has no token, no validation, no sequence, no feed lock and no
archiving. Whatever Simplefeed reaches relative to this is the cost of its promises.
"""

from __future__ import annotations

import json
from typing import Any

import falcon
from sqlalchemy import Column, Integer, MetaData, Table, Text

from simplefeed.settings import Settings
from simplefeed.store import open_store
from simplefeed.store.sql import SqlStore

metadata = MetaData()
rows = Table(
    "baseline_events",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("data", Text, nullable=False),
)
INSERT = rows.insert()


class Events:
    def __init__(self, db: SqlStore) -> None:
        self.db = db

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        payload: Any = json.loads(req.bounded_stream.read())
        items = payload if isinstance(payload, list) else [payload]
        with self.db.write() as conn:
            conn.execute(INSERT, [{"data": json.dumps(item)} for item in items])
        resp.status = falcon.HTTP_201
        resp.media = {"stored": len(items)}


class Health:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"status": "ok"}


def create_app() -> falcon.App[falcon.Request, falcon.Response]:
    # The benchmark creates the table before it starts uWSGI, because workers would race to.
    db = open_store(Settings.from_env().database_url)
    assert isinstance(db, SqlStore)
    app = falcon.App()
    app.add_route("/entries", Events(db))
    app.add_route("/healthz", Health())
    return app


application = create_app()

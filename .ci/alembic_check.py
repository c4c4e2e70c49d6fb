"""`alembic check` (no drift between the models and the migrations) on a fresh database.

Usage: python .ci/alembic_check.py sqlite|postgresql://...  (a PostgreSQL URL is the server to
create a scratch database on; it is dropped afterwards).
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from alembic import command
from simplefeed.store.schema import alembic_config


def check(url: str) -> None:
    cfg = alembic_config(url)
    command.upgrade(cfg, "head")
    command.check(cfg)
    print(f"alembic check: no drift on {make_url(url).get_backend_name()}")


def main(target: str) -> None:
    if target == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            check(f"sqlite:///{Path(tmp) / 'check.sqlite3'}")
        return
    admin_url = make_url(target)
    name = f"sf_check_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        check(admin_url.set(database=name).render_as_string(hide_password=False))
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main(sys.argv[1])

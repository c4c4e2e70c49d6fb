"""The outbox in a producer app's own database, SQLite and PostgreSQL: its table in the app's
metadata, and events written inside the app's transaction, with Core connections and ORM
sessions. Ids are handed out in commit order (the lock :meth:`Outbox.add` takes)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, create_engine, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from bench.servers import scratch_postgres_database
from simplefeed.errors import InvalidEvent
from simplefeed.outbox import Outbox


@pytest.fixture(params=["sqlite", "postgres"])
def app_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of a producer app: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'app.sqlite3'}"
        return
    with scratch_postgres_database("sf_outbox") as url:
        yield url


@pytest.fixture
def app_engine(app_url: str) -> Iterator[Engine]:
    engine = create_engine(app_url)
    yield engine
    engine.dispose()


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    state: Mapped[str] = mapped_column(String(20))


def rows(engine: Engine, outbox: Outbox) -> list[tuple[int, str, str]]:
    t = outbox.table
    with engine.connect() as c:
        return [
            tuple(r) for r in c.execute(select(t.c.id, t.c.entry_id, t.c.event).order_by(t.c.id))
        ]


def test_the_table_joins_the_app_s_metadata(app_engine: Engine) -> None:
    metadata = MetaData()
    Table("orders", metadata, Column("id", Integer, primary_key=True))
    outbox = Outbox(feed="orders", metadata=metadata)
    assert outbox.table.name == "simplefeed_outbox_orders"
    assert outbox.table.metadata is metadata
    metadata.create_all(app_engine)
    assert rows(app_engine, outbox) == []
    assert Outbox(feed="x", table_name="my_outbox").table.name == "my_outbox"
    with pytest.raises(ValueError, match="not a feed name"):
        Outbox(feed="Orders!")


def test_a_core_connection_writes_the_event_in_its_transaction(app_engine: Engine) -> None:
    outbox = Outbox(feed="orders")
    outbox.table.metadata.create_all(app_engine)
    with app_engine.begin() as c:
        kept = outbox.add(c, {"title": "order paid", "content": {"order": 42}})
    with pytest.raises(RuntimeError), app_engine.begin() as c:
        outbox.add(c, {"title": "rolled back"})
        raise RuntimeError("the app's transaction fails")
    with app_engine.begin() as c:
        given = outbox.add(c, {"title": "with an id", "id": "tag:shop.example,2026:order-1"})
    found = rows(app_engine, outbox)
    assert [(entry_id, body) for _, entry_id, body in found] == [
        (kept, f'{{"title":"order paid","content":{{"order":42}},"id":"{kept}"}}'),
        (given, '{"title":"with an id","id":"tag:shop.example,2026:order-1"}'),
    ]
    assert kept.startswith("urn:uuid:")


def test_an_orm_session_writes_the_event_with_the_app_s_rows(app_engine: Engine) -> None:
    outbox = Outbox(feed="orders", metadata=Base.metadata)
    Base.metadata.create_all(app_engine)
    try:
        with Session(app_engine) as session:
            session.add(Order(id=1, state="paid"))
            outbox.add(session, {"title": "order 1 paid"})
            session.commit()
        with Session(app_engine) as session:
            session.add(Order(id=2, state="paid"))
            outbox.add(session, {"title": "order 2 paid"})
            session.rollback()
        with Session(app_engine) as session:
            assert [o.id for o in session.scalars(select(Order))] == [1]
        assert [body for _, _, body in rows(app_engine, outbox)] == [
            f'{{"title":"order 1 paid","id":"{rows(app_engine, outbox)[0][1]}"}}'
        ]
    finally:
        Base.metadata.remove(outbox.table)


def test_an_event_the_server_would_refuse_is_refused_and_nothing_written(
    app_engine: Engine,
) -> None:
    outbox = Outbox(feed="orders")
    outbox.table.metadata.create_all(app_engine)
    with pytest.raises(InvalidEvent) as raised, app_engine.begin() as c:
        outbox.add(c, {"title": "t", "links": [{"href": "/relative"}]})
    assert raised.value.field == "links[0].href"
    assert rows(app_engine, outbox) == []


@pytest.mark.postgres
def test_ids_are_handed_out_in_commit_order_on_postgresql(tmp_path: Path) -> None:
    """A second transaction adding an event waits for the first to end: so it takes a higher
    id and commits after it. Without the lock, it would take id 2 and commit while id 1 is
    still open, and a relay would ship 2 before 1."""
    with scratch_postgres_database("sf_outbox") as url:
        engine = create_engine(url)
        try:
            outbox = Outbox(feed="orders")
            outbox.table.metadata.create_all(engine)
            waiting = text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            first = engine.connect()
            first.begin()
            one = outbox.add(first, {"title": "first to add"})
            second: list[str] = []

            def add_second() -> None:
                with engine.begin() as c:
                    second.append(outbox.add(c, {"title": "second to add"}))

            worker = threading.Thread(target=add_second)
            worker.start()
            with engine.connect() as watcher:
                while not watcher.execute(waiting).scalar_one():
                    assert worker.is_alive()
                    watcher.rollback()
            assert second == []
            first.commit()
            first.close()
            worker.join(30)
            assert [entry_id for _, entry_id, _ in rows(engine, outbox)] == [one, *second]
        finally:
            engine.dispose()

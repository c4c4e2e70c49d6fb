"""A Flask order service that publishes "order paid" events through an outbox.

The order and its event are written in one transaction. If the transaction fails, neither is
kept. `simplefeed relay` ships the event to the feed later.
"""

from __future__ import annotations

import os

from flask import Flask, abort, jsonify
from flask.typing import ResponseReturnValue
from sqlalchemy import String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from simplefeed.outbox import Outbox


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    state: Mapped[str] = mapped_column(String(20))


# The outbox's table joins the app's metadata, so migrations create it with the others.
outbox = Outbox(feed="orders", metadata=Base.metadata)


def create_app(database_url: str) -> Flask:
    engine = create_engine(database_url)
    Base.metadata.create_all(engine)  # a real app runs its alembic migrations instead
    transaction = sessionmaker(engine).begin  # commits at the end of the block, or rolls back
    app = Flask(__name__)

    @app.post("/orders/<int:order_id>")
    def create_order(order_id: int) -> ResponseReturnValue:
        with transaction() as db:
            db.add(Order(id=order_id, state="new"))
        return jsonify(order=order_id), 201

    @app.post("/orders/<int:order_id>/pay")
    def pay(order_id: int) -> ResponseReturnValue:
        with transaction() as db:
            order = db.get(Order, order_id)
            if order is None:
                abort(404)
            order.state = "paid"
            # In the same transaction as the order's new state. Add the event last, because
            # adding it holds the outbox's lock until the commit.
            event_id = outbox.add(db, {"title": "order paid", "content": {"order": order_id}})
        return jsonify(order=order_id, event=event_id), 200

    return app


if __name__ == "__main__":
    create_app(os.environ.get("SHOP_DATABASE_URL", "sqlite:///shop.sqlite3")).run(port=5000)

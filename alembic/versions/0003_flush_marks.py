"""flush marks: the WAL-flush barrier of PostgreSQL appends committed asynchronously

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "flush_marks",
        sa.Column("backend_pid", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("backend_pid", name=op.f("pk_flush_marks")),
    )


def downgrade() -> None:
    op.drop_table("flush_marks")

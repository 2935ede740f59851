"""Capture: a message's parts are stored compressed (`messages.parts_z`: zlib level 1 of their compact JSON, 0.35-0.44
of its size; bench/README.md "Space"), `parts_json` emptied. Every stored row is converted here, in batches by id (a
batch's rows in memory at once, never the table); the readers (`capture/rows.parts_of`) still take a row of the old
form. A SQLite file keeps its size until VACUUM, its freed pages taken by later rows; PostgreSQL's autovacuum does the
same with the old row versions. Downgrade writes the JSON back and drops the column.

Revision ID: 0014
Revises: 0013
"""
import zlib

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BATCH = 1000  # rows per read and per executemany
LEVEL = 1  # app/core/capture/rows.LEVEL at this revision


def upgrade() -> None:
    op.add_column("messages", sa.Column("parts_z", sa.LargeBinary, nullable=True))
    conn = op.get_bind()
    read = sa.text("SELECT id, parts_json FROM messages WHERE id > :after AND parts_z IS NULL ORDER BY id LIMIT :n")
    write = sa.text("UPDATE messages SET parts_z = :z, parts_json = '' WHERE id = :id").bindparams(
        sa.bindparam("z", type_=sa.LargeBinary))
    after = 0
    while rows := conn.execute(read, {"after": after, "n": BATCH}).all():
        conn.execute(write, [{"id": i, "z": zlib.compress((plain or "[]").encode(), LEVEL)} for i, plain in rows])
        after = rows[-1][0]


def downgrade() -> None:
    conn = op.get_bind()
    read = sa.text("SELECT id, parts_z FROM messages WHERE id > :after AND parts_z IS NOT NULL ORDER BY id LIMIT :n")
    write = sa.text("UPDATE messages SET parts_json = :p WHERE id = :id")
    after = 0
    while rows := conn.execute(read, {"after": after, "n": BATCH}).all():
        conn.execute(write, [{"id": i, "p": zlib.decompress(z).decode()} for i, z in rows])
        after = rows[-1][0]
    # ALTER TABLE … DROP COLUMN on both (SQLite >= 3.35): no batch copy, whose DROP TABLE would cascade to
    # request_keys under PRAGMA foreign_keys=ON
    op.drop_column("messages", "parts_z")

"""The sessions an incremental build still reads, kept per base model (issue 43): `pending_sessions` (a session
below the kept watermark that no used dataset holds unchanged, whether one holds it by id, the verdict the last
build gave it), so a build and the school's new-session count cost what is new. Starts empty: the first build or
look fills it from every stored session once. The school's old kept count (`school.new_sessions.*` in settings) goes;
downgrade drops the table and its watermarks (`datasets.pending.*`), and the old count counts again once.

Revision ID: 0016
Revises: 0015
"""
import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pending_sessions",
        sa.Column("model", sa.String(40), primary_key=True),
        sa.Column("session_id", sa.String(40), primary_key=True),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("root", sa.Integer, nullable=False),
        sa.Column("used", sa.Integer, nullable=False),
        sa.Column("scope", sa.String(16), nullable=True),
        sa.Column("verdict", sa.Text, nullable=True),
    )
    op.execute(sa.text("DELETE FROM settings WHERE key LIKE 'school.new_sessions.%'"))


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM settings WHERE key LIKE 'datasets.pending.%'"))
    op.drop_table("pending_sessions")

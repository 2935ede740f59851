"""Reads that cost what is new: the contradiction scan's index (`request_keys`: captured user messages by a hash of
their normalised text), the tool counts behind the Capture tab's histogram (`session_tools`), `sessions.updated_at`
indexed (what was stored since a watermark) and (`parent_id`, `started_at`) (the newest top-level sessions without sorting them all).
Both tables start empty: their first reader fills them for every stored session once.

Revision ID: 0011
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "request_keys",
        sa.Column("message_id", sa.Integer, sa.ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("session_id", sa.String(40), nullable=False),
        sa.Column("key", sa.String(16), nullable=False),
    )
    op.create_index("ix_request_keys_key", "request_keys", ["key"])
    op.create_table(
        "session_tools",
        sa.Column("session_id", sa.String(40), sa.ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("tool", sa.String(200), primary_key=True),
        sa.Column("calls", sa.Integer, nullable=False),
    )
    op.create_index("ix_sessions_updated_at", "sessions", ["updated_at"])
    op.create_index("ix_sessions_root_started", "sessions", ["parent_id", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_sessions_root_started", "sessions")
    op.drop_table("session_tools")
    op.drop_index("ix_sessions_updated_at", "sessions")
    op.drop_index("ix_request_keys_key", "request_keys")
    op.drop_table("request_keys")

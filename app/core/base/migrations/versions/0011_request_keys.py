"""The contradiction scan's index: captured user messages by a hash of their normalised text (`request_keys`), and
`sessions.updated_at` indexed, so the scan reads what was stored since it last looked instead of every message.
The table starts empty: the next scan fills it for every stored session once.

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
    op.create_index("ix_sessions_updated_at", "sessions", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_sessions_updated_at", "sessions")
    op.drop_index("ix_request_keys_key", "request_keys")
    op.drop_table("request_keys")

"""The Capture tab's counts by deltas, so its reads cost what is new (bench/bench_scale): `session_counts` (what
each session added, as counted), `capture_counts` (sessions, messages, message rows per day, agent, project and
top-level or not) and `tool_counts` (calls per tool) replace `session_tools`, whose sum grew with every session
stored; `request_keys.session_id` indexed (the contradiction scan replaces a re-stored session's keys by it, a scan
of every key without). The new tables start empty: their first reader fills them for every stored session once.

Revision ID: 0013
Revises: 0012
"""
import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

def upgrade() -> None:
    op.create_index("ix_request_keys_session_id", "request_keys", ["session_id"])
    op.create_table(
        "session_counts",
        sa.Column("session_id", sa.String(40), primary_key=True),
        sa.Column("root", sa.Integer, nullable=False),
        sa.Column("day", sa.String(10), nullable=True),
        sa.Column("agent", sa.String(20), nullable=False),
        sa.Column("project", sa.Text, nullable=True),
        sa.Column("messages", sa.Integer, nullable=False),
        sa.Column("message_rows", sa.Integer, nullable=False),
        sa.Column("tools_json", sa.Text, nullable=False),
    )
    op.create_table(
        "capture_counts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("root", sa.Integer, nullable=False),
        sa.Column("day", sa.String(10), nullable=True),
        sa.Column("agent", sa.String(20), nullable=False),
        sa.Column("project", sa.Text, nullable=True),
        sa.Column("sessions", sa.Integer, nullable=False),
        sa.Column("messages", sa.Integer, nullable=False),
        sa.Column("message_rows", sa.Integer, nullable=False),
    )
    op.create_index("ix_capture_counts_key", "capture_counts", ["day", "agent", "project", "root"])
    op.create_table(
        "tool_counts",
        sa.Column("tool", sa.String(200), primary_key=True),
        sa.Column("calls", sa.Integer, nullable=False),
    )
    op.drop_table("session_tools")
    op.execute(sa.text("DELETE FROM settings WHERE key IN ('capture.tools_indexed', 'capture.counts_indexed')"))


def downgrade() -> None:
    op.create_table(  # empty, its watermark gone: 0012's reader fills it for every session again
        "session_tools",
        sa.Column("session_id", sa.String(40), sa.ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("tool", sa.String(200), primary_key=True),
        sa.Column("calls", sa.Integer, nullable=False),
    )
    op.execute(sa.text("DELETE FROM settings WHERE key IN ('capture.tools_indexed', 'capture.counts_indexed')"))
    op.drop_table("tool_counts")
    op.drop_index("ix_capture_counts_key", "capture_counts")
    op.drop_table("capture_counts")
    op.drop_table("session_counts")
    op.drop_index("ix_request_keys_session_id", "request_keys")

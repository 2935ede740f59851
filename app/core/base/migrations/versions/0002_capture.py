"""Capture: followed transcript files, sessions, messages, imports, quarantine, dropped dataset files.

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

NOW = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "capture_files",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("path", sa.Text, nullable=False, unique=True),
        sa.Column("agent", sa.String(20), nullable=False),
        sa.Column("session_id", sa.String(40), index=True),
        *[sa.Column(c, sa.Integer, nullable=False, server_default="0")
          for c in ("offset", "size", "lines", "stored", "quarantined", "skipped")],
        sa.Column("mtime", sa.Float, nullable=False, server_default="0"),
        sa.Column("error", sa.Text),
        sa.Column("updated_at", NOW, nullable=False),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("agent", sa.String(20), nullable=False, index=True),
        sa.Column("native_id", sa.Text, nullable=False),
        sa.Column("parent_id", sa.String(40), index=True),
        sa.Column("spawned_by", sa.Text),
        sa.Column("source_path", sa.Text, nullable=False),
        sa.Column("project", sa.Text, index=True),
        *[sa.Column(c, sa.Text) for c in ("cwd", "git_branch", "model")],
        sa.Column("agent_version", sa.String(40)),
        sa.Column("started_at", sa.String(40)),
        sa.Column("ended_at", sa.String(40), index=True),
        sa.Column("day", sa.String(10), index=True),
        *[sa.Column(c, sa.Integer, nullable=False, server_default="0")
          for c in ("messages", "turns", "tool_calls", "errors", "input_tokens", "output_tokens", "compactions",
                    "abandoned_branches", "secrets_scrubbed")],
        sa.Column("outcome", sa.String(20), nullable=False, server_default="finished", index=True),
        sa.Column("exploration", sa.String(20), nullable=False, server_default="minimal"),
        sa.Column("signals_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("title", sa.Text, nullable=False, server_default=""),
        sa.Column("updated_at", NOW, nullable=False),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(40), sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        *[sa.Column(c, sa.Integer, nullable=False, server_default="0")
          for c in ("branch", "seq", "is_error", "compact_summary", "meta")],
        sa.Column("role", sa.String(12), nullable=False),
        sa.Column("text", sa.Text, nullable=False, server_default=""),
        sa.Column("parts_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("tools", sa.Text, nullable=False, server_default=""),
        sa.Column("timestamp", sa.String(40)),
        sa.Column("model", sa.Text),
        sa.Column("line", sa.Integer),
    )
    op.create_table(
        "imports",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("origin", sa.String(20), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("agent", sa.String(20)),
        sa.Column("path", sa.Text, nullable=False),
        *[sa.Column(c, sa.Integer, nullable=False, server_default="0")
          for c in ("lines_in", "stored", "quarantined", "skipped")],
        sa.Column("status", sa.String(20), nullable=False, server_default="ok"),
        sa.Column("message", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", NOW, nullable=False, index=True),
    )
    op.create_table(
        "quarantine",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("import_id", sa.Integer, sa.ForeignKey("imports.id"), nullable=False, index=True),
        sa.Column("source_path", sa.Text, nullable=False),
        sa.Column("line", sa.Integer),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("excerpt", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", NOW, nullable=False),
    )
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False, index=True),
        sa.Column("spec", sa.String(40)),
        *[sa.Column(c, sa.Integer, nullable=False, server_default="0") for c in ("accepted", "records", "problems")],
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", NOW, nullable=False),
    )


def downgrade() -> None:
    for table in ("datasets", "quarantine", "imports", "messages", "sessions", "capture_files"):
        op.drop_table(table)

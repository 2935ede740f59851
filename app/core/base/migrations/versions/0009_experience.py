"""The experience buffer: requests the built-in server answered (scrubbed), the corrections of the answers that need
improvement, and the calls made to the teacher's API (its daily token budget).

Revision ID: 0009
Revises: 0008
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "experiences",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("client", sa.String(120), nullable=False, server_default=""),
        sa.Column("model", sa.Text, nullable=False, server_default=""),
        sa.Column("model_sha256", sa.String(64), nullable=False, server_default=""),
        sa.Column("route", sa.String(40), nullable=False, server_default="chat"),
        sa.Column("request_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("answer_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("finish_reason", sa.String(20), nullable=False, server_default=""),
        sa.Column("latency_ms", sa.Float, nullable=False, server_default="0"),
        sa.Column("prompt_tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("completion_tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("state", sa.String(20), nullable=False, server_default="recorded", index=True),
        sa.Column("reasons_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("feedback", sa.String(10), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_try_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
    )
    op.create_table(
        "corrections",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("experience_id", sa.String(40), sa.ForeignKey("experiences.id", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("source", sa.String(20), nullable=False, server_default="teacher"),
        sa.Column("teacher_model", sa.Text, nullable=False, server_default=""),
        sa.Column("answer_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("state", sa.String(20), nullable=False, index=True),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("score", sa.Float, nullable=False, server_default="0"),
        sa.Column("prompt_tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("completion_tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("cost", sa.Float, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_by", sa.String(20), nullable=False, server_default=""),
    )
    op.create_table(
        "teacher_calls",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("experience_id", sa.String(40), nullable=False, server_default=""),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("retry_after_s", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_table("teacher_calls")
    op.drop_table("corrections")
    op.drop_table("experiences")

"""Cycles: the learning loop as a persisted state machine; session marks (good/bad) the dataset builder honours.

Revision ID: 0007
Revises: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cycles",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("base_model", sa.Text, nullable=False),
        sa.Column("stage", sa.String(20), nullable=False),
        sa.Column("state", sa.String(20), nullable=False, index=True),
        sa.Column("trigger", sa.Text, nullable=False, server_default=""),
        sa.Column("inputs_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("outputs_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("times_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("starts_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("resumes_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("report_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "session_marks",
        sa.Column("session_id", sa.String(200), primary_key=True),
        sa.Column("weight", sa.Float, nullable=False),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("session_marks")
    op.drop_table("cycles")

"""The training queue: a position per job (FIFO within a priority, reorderable), lineage, the checkpoint a run
resumed from, and app settings (queue paused, concurrent jobs).

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("position", sa.Float, nullable=False, server_default="0"))
        batch.add_column(sa.Column("config_fingerprint", sa.String(64), nullable=True))
        batch.add_column(sa.Column("source", sa.String(20), nullable=False, server_default="user"))
    op.execute("UPDATE jobs SET position = (SELECT COUNT(*) FROM jobs AS j2 WHERE j2.created_at <= jobs.created_at)")
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("resume_step", sa.Integer, nullable=True))
    op.create_table(
        "settings",
        sa.Column("key", sa.String(60), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("settings")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("resume_step")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("source")
        batch.drop_column("config_fingerprint")
        batch.drop_column("position")

"""Who acted in a session (issue 42): `sessions.models` (the acting models, comma separated, in the order they first
acted) and `sessions.actor` (teacher | student | mixed, indexed: the student's own work is counted and built apart).
A session stored before gets its stored `model` (the last one that acted) as its models and `teacher` as its actor,
as it counted until now; the first reader with the student's names (capture/actors.classified) derives every
session's actor again from its models, once. Downgrade drops both columns and that reader's mark.

Revision ID: 0017
Revises: 0016
"""
import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("models", sa.Text, nullable=True))
    op.add_column("sessions", sa.Column("actor", sa.String(10), nullable=False, server_default="teacher"))
    op.create_index("ix_sessions_actor", "sessions", ["actor"])
    op.execute(sa.text("UPDATE sessions SET models = model WHERE model IS NOT NULL AND model NOT LIKE '<%'"))
    op.execute(sa.text("DELETE FROM settings WHERE key = 'capture.students'"))


def downgrade() -> None:
    op.drop_index("ix_sessions_actor", table_name="sessions")
    # ALTER TABLE … DROP COLUMN on both (SQLite >= 3.35): no batch copy, whose DROP TABLE would cascade to the
    # messages under PRAGMA foreign_keys=ON
    op.drop_column("sessions", "actor")
    op.drop_column("sessions", "models")
    op.execute(sa.text("DELETE FROM settings WHERE key = 'capture.students'"))

"""Team mode: invited members (`team_members`, token kept as sha256) and the member a pooled session came from
(`sessions.member`, null for the data dir's own sessions).

Revision ID: 0012
Revises: 0011
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "team_members",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(80), nullable=False, unique=True),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("member", sa.String(80), nullable=True))
    op.create_index("ix_sessions_member", "sessions", ["member"])


def downgrade() -> None:
    op.drop_index("ix_sessions_member", "sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("member")
    op.drop_table("team_members")

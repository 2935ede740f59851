"""Built datasets (immutable; manifest + the sessions each used, by split) and frozen held-out sets per base model.

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

NOW = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "built_datasets",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(80), nullable=False, unique=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("base_model", sa.Text, nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False, index=True),
        sa.Column("spec_id", sa.String(40), nullable=False),
        sa.Column("template_sha256", sa.String(64), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("mode", sa.String(20), nullable=False),
        *[sa.Column(c, sa.Integer, nullable=False, server_default="0")
          for c in ("examples", "train", "val", "test", "excluded")],
        sa.Column("manifest_json", sa.Text, nullable=False),
        sa.Column("created_at", NOW, nullable=False),
    )
    op.create_table(
        "dataset_sessions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("dataset_id", sa.Integer, sa.ForeignKey("built_datasets.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("session_id", sa.String(40), nullable=False, index=True),
        sa.Column("split", sa.String(8), nullable=False),
        sa.Column("examples", sa.Integer, nullable=False, server_default="0"),
        sa.Column("content_sha256", sa.String(64), nullable=False),
    )
    op.create_table(
        "heldout",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("base_model", sa.Text, nullable=False, index=True),
        sa.Column("session_id", sa.String(40), nullable=False),
        sa.Column("dataset_id", sa.Integer, nullable=True),
        sa.Column("frozen_at", NOW, nullable=False),
        sa.UniqueConstraint("base_model", "session_id", name="uq_heldout_model_session"),
    )


def downgrade() -> None:
    for table in ("heldout", "dataset_sessions", "built_datasets"):
        op.drop_table(table)

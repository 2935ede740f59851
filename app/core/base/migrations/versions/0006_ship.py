"""Shipping: GGUF exports of checkpoints (files, smoke tests, embedded template) and deployments (what the built-in
server serves, in order; rollback rows point back). A trigger keeps the gate's rule: a checkpoint is deployed only
with a passing verdict (a plpgsql trigger on PostgreSQL).

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

DEPLOY_NEEDS_PASS = """
CREATE TRIGGER deployment_needs_passing_verdict BEFORE INSERT ON deployments
WHEN NEW.checkpoint_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM verdicts WHERE checkpoint_id = NEW.checkpoint_id AND verdict = 'pass')
BEGIN SELECT RAISE(ABORT, 'a checkpoint is deployable only with a passing verdict'); END
"""
PG_DEPLOY_NEEDS_PASS = """
CREATE FUNCTION deployment_needs_passing_verdict() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.checkpoint_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM verdicts WHERE checkpoint_id = NEW.checkpoint_id AND verdict = 'pass') THEN
        RAISE EXCEPTION 'a checkpoint is deployable only with a passing verdict'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER deployment_needs_passing_verdict BEFORE INSERT ON deployments
FOR EACH ROW EXECUTE FUNCTION deployment_needs_passing_verdict();
"""


def upgrade() -> None:
    op.create_table(
        "exports",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("checkpoint_id", sa.Integer, sa.ForeignKey("checkpoints.id"), nullable=True, index=True),
        sa.Column("base_model", sa.Text, nullable=False),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("key", sa.String(64), nullable=False, index=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("files_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("lora_file", sa.Text, nullable=True),
        sa.Column("template_sha256", sa.String(64), nullable=False, server_default=""),
        sa.Column("meta_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "deployments",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("export_id", sa.Integer, sa.ForeignKey("exports.id"), nullable=False),
        sa.Column("file", sa.Text, nullable=False),
        sa.Column("quant", sa.String(20), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("checkpoint_id", sa.Integer, sa.ForeignKey("checkpoints.id"), nullable=True),
        sa.Column("base_model", sa.Text, nullable=False),
        sa.Column("action", sa.String(20), nullable=False),
        sa.Column("replaces_id", sa.Integer, nullable=True),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.execute(PG_DEPLOY_NEEDS_PASS if op.get_bind().dialect.name == "postgresql" else DEPLOY_NEEDS_PASS)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS deployment_needs_passing_verdict ON deployments")
        op.execute("DROP FUNCTION IF EXISTS deployment_needs_passing_verdict()")
    else:
        op.execute("DROP TRIGGER IF EXISTS deployment_needs_passing_verdict")
    op.drop_table("deployments")
    op.drop_table("exports")

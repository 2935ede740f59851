"""Judging: evaluations of checkpoints (and the base model) on a held-out set, gate verdicts, promotions (the deployed
pointer's history). Triggers enforce the registry's transitions: a run completes only once a checkpoint of it is
registered, and only a checkpoint with a passing verdict can be promoted (SQLite triggers; plpgsql ones on
PostgreSQL).

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

RUN_NEEDS_CHECKPOINT = """
CREATE TRIGGER run_completes_after_checkpoint BEFORE UPDATE OF state ON runs
WHEN NEW.state IN ('completed', 'stopped') AND OLD.state NOT IN ('completed', 'stopped')
     AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE run_id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'a run is completed only after its checkpoint is registered'); END
"""
PROMOTION_NEEDS_PASS = """
CREATE TRIGGER promotion_needs_passing_verdict BEFORE INSERT ON promotions
WHEN NEW.checkpoint_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM verdicts WHERE id = NEW.verdict_id AND checkpoint_id = NEW.checkpoint_id AND verdict = 'pass')
BEGIN SELECT RAISE(ABORT, 'a checkpoint is deployable only with a passing verdict'); END
"""
# PostgreSQL: the same rules as plpgsql row triggers, raising an integrity violation (SQLite's ABORT is one too)
PG_RUN_NEEDS_CHECKPOINT = """
CREATE FUNCTION run_completes_after_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('completed', 'stopped') AND OLD.state NOT IN ('completed', 'stopped')
       AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE run_id = NEW.id) THEN
        RAISE EXCEPTION 'a run is completed only after its checkpoint is registered'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER run_completes_after_checkpoint BEFORE UPDATE OF state ON runs
FOR EACH ROW EXECUTE FUNCTION run_completes_after_checkpoint();
"""
PG_PROMOTION_NEEDS_PASS = """
CREATE FUNCTION promotion_needs_passing_verdict() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.checkpoint_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM verdicts WHERE id = NEW.verdict_id AND checkpoint_id = NEW.checkpoint_id AND verdict = 'pass')
    THEN
        RAISE EXCEPTION 'a checkpoint is deployable only with a passing verdict'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER promotion_needs_passing_verdict BEFORE INSERT ON promotions
FOR EACH ROW EXECUTE FUNCTION promotion_needs_passing_verdict();
"""


def upgrade() -> None:
    op.create_table(
        "evals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("checkpoint_id", sa.Integer, sa.ForeignKey("checkpoints.id"), nullable=True, index=True),
        sa.Column("base_model", sa.Text, nullable=False),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("adapter_sha256", sa.String(64), nullable=True),
        sa.Column("eval_set", sa.Text, nullable=False),
        sa.Column("eval_set_sha256", sa.String(64), nullable=False, index=True),
        sa.Column("settings_sha256", sa.String(64), nullable=False),
        sa.Column("contexts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("examples", sa.Integer, nullable=False, server_default="0"),
        sa.Column("metrics_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("report_path", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "verdicts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("checkpoint_id", sa.Integer, sa.ForeignKey("checkpoints.id"), nullable=False, index=True),
        sa.Column("eval_id", sa.Integer, sa.ForeignKey("evals.id"), nullable=False),
        sa.Column("base_eval_id", sa.Integer, sa.ForeignKey("evals.id"), nullable=True),
        sa.Column("deployed_eval_id", sa.Integer, sa.ForeignKey("evals.id"), nullable=True),
        sa.Column("verdict", sa.String(20), nullable=False),
        sa.Column("reasons_json", sa.Text, nullable=False),
        sa.Column("thresholds_json", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "promotions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("base_model", sa.Text, nullable=False, index=True),
        sa.Column("checkpoint_id", sa.Integer, sa.ForeignKey("checkpoints.id"), nullable=True),
        sa.Column("verdict_id", sa.Integer, sa.ForeignKey("verdicts.id"), nullable=True),
        sa.Column("action", sa.String(20), nullable=False),
        sa.Column("replaces_id", sa.Integer, nullable=True),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute(PG_RUN_NEEDS_CHECKPOINT if postgres else RUN_NEEDS_CHECKPOINT)
    op.execute(PG_PROMOTION_NEEDS_PASS if postgres else PROMOTION_NEEDS_PASS)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS promotion_needs_passing_verdict ON promotions")
        op.execute("DROP TRIGGER IF EXISTS run_completes_after_checkpoint ON runs")
        op.execute("DROP FUNCTION IF EXISTS promotion_needs_passing_verdict(), run_completes_after_checkpoint()")
    else:
        op.execute("DROP TRIGGER IF EXISTS promotion_needs_passing_verdict")
        op.execute("DROP TRIGGER IF EXISTS run_completes_after_checkpoint")
    op.drop_table("promotions")
    op.drop_table("verdicts")
    op.drop_table("evals")

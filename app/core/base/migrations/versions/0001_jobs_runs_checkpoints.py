"""First revision: jobs, runs, checkpoints (sessions, datasets, evals, deployments come in later revisions).

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("kind", sa.String(20), nullable=False, server_default="sft"),
        sa.Column("state", sa.String(20), nullable=False, server_default="queued"),
        sa.Column("priority", sa.String(10), nullable=False, server_default="normal"),
        sa.Column("dataset_path", sa.Text, nullable=False),
        sa.Column("dataset_sha256", sa.String(64), nullable=False),
        sa.Column("model_ref", sa.Text, nullable=False),
        sa.Column("spec_path", sa.Text, nullable=False),
        sa.Column("spec_sha256", sa.String(64), nullable=False),
        sa.Column("records", sa.Integer, nullable=False, server_default="0"),
        sa.Column("error", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(40), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("run_dir", sa.Text, nullable=False),
        sa.Column("socket_path", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer),
        sa.Column("pid_started", sa.Float),
        sa.Column("state", sa.String(20), nullable=False, server_default="starting"),
        sa.Column("exit_code", sa.Integer),
        sa.Column("result_json", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_runs_job_id", "runs", ["job_id"])
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("sha256", sa.String(64)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_checkpoints_run_id", "checkpoints", ["run_id"])


def downgrade() -> None:
    op.drop_table("checkpoints")
    op.drop_table("runs")
    op.drop_table("jobs")

"""The blind test (issue 41): `blind_tests` (a model, the evaluation its student answers come from, who judges) and
`blind_trials` (a context, the agent's and the student's answer, which side is the agent's, the pick, the better
answer, the seconds taken). Downgrade drops both.

Revision ID: 0015
Revises: 0014
"""
import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blind_tests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("base_model", sa.Text, nullable=False),
        sa.Column("checkpoint_id", sa.Integer, sa.ForeignKey("checkpoints.id"), nullable=True, index=True),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("eval_id", sa.Integer, sa.ForeignKey("evals.id"), nullable=True),
        sa.Column("eval_set", sa.Text, nullable=False),
        sa.Column("eval_set_sha256", sa.String(64), nullable=False),
        sa.Column("judge", sa.String(20), nullable=False),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "blind_trials",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("test_id", sa.Integer, sa.ForeignKey("blind_tests.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("context_key", sa.String(64), nullable=False),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("turn", sa.Integer, nullable=False),
        sa.Column("context_json", sa.Text, nullable=False),
        sa.Column("teacher", sa.Text, nullable=False),
        sa.Column("student", sa.Text, nullable=False),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("agent_side", sa.String(1), nullable=False),
        sa.Column("pick", sa.String(10), nullable=True),
        sa.Column("better", sa.String(4), nullable=True),
        sa.Column("seconds", sa.Float, nullable=True),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("test_id", "position", name="uq_blind_trials_position"),
    )


def downgrade() -> None:
    op.drop_table("blind_trials")
    op.drop_table("blind_tests")

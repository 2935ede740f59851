"""The gate weighs evidence: its third verdict is `inconclusive` (not enough evidence either way), no longer
`compare_only`. Stored verdicts, and the verdicts copied into cycles' outputs and report cards, are renamed.

Revision ID: 0008
Revises: 0007
"""
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

COLUMNS = (("cycles", "outputs_json"), ("cycles", "report_json"))


def _rename(old: str, new: str) -> None:
    op.execute(f"UPDATE verdicts SET verdict = '{new}' WHERE verdict = '{old}'")
    for table, column in COLUMNS:
        for sep in (": ", ":"):  # json.dumps' default separator, and a compact one
            before, after = f'"verdict"{sep}"{old}"', f'"verdict"{sep}"{new}"'
            op.execute(f"UPDATE {table} SET {column} = replace({column}, '{before}', '{after}') "
                       f"WHERE {column} LIKE '%{old}%'")


def upgrade() -> None:
    _rename("compare_only", "inconclusive")


def downgrade() -> None:
    _rename("inconclusive", "compare_only")

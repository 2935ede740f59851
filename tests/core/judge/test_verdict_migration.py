"""Migration 0008: verdicts stored as `compare_only` (and the copies in cycles' outputs and report cards) read
`inconclusive` after the upgrade; other verdicts are left as they were."""
from __future__ import annotations

import json
import sqlite3

from alembic import command
from sqlalchemy import create_engine

from app.core.base.store import Store, alembic_config


def test_compare_only_verdicts_become_inconclusive(ns_home):
    path = ns_home / "nightschool.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        cfg = alembic_config(f"sqlite:///{path}")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0007")
    engine.dispose()
    con = sqlite3.connect(path)
    for i, verdict in enumerate(("compare_only", "pass", "fail"), 1):
        con.execute("insert into verdicts (id, checkpoint_id, eval_id, verdict, reasons_json, thresholds_json, "
                    "created_at) values (?, 1, 1, ?, '[]', '{}', '2026-01-01')", (i, verdict))
    outputs = {"judging": {"verdict": "compare_only", "reasons": ["compare_only stays in words"]}}
    con.execute("insert into cycles (id, base_model, stage, state, outputs_json, report_json, started_at, updated_at) "
                "values (1, 'm', 'judging', 'refused', ?, ?, '2026-01-01', '2026-01-01')",
                (json.dumps(outputs), json.dumps({"verdict": "compare_only"}, separators=(",", ":"))))
    con.commit()
    con.close()

    Store().close()  # opening the store upgrades it to the head

    con = sqlite3.connect(path)
    assert [r[0] for r in con.execute("select verdict from verdicts order by id")] == ["inconclusive", "pass", "fail"]
    out, card = con.execute("select outputs_json, report_json from cycles").fetchone()
    assert json.loads(out)["judging"] == {"verdict": "inconclusive", "reasons": ["compare_only stays in words"]}
    assert json.loads(card) == {"verdict": "inconclusive"}
    con.close()

"""Tool calls per transcript of ../shared/fixtures/real-world-2 as its MANIFEST counts them against what capture
stores (the real import into a temp store): per file, calls on the branch that reached the end and on abandoned
branches; prints every file that differs and the totals.

    .venv/bin/python -m bench.bench_capture_counts
"""
from __future__ import annotations

import csv
import os
import re
import tempfile
from collections import defaultdict
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real-world-2"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["NIGHTSCHOOL_HOME"] = str(tmp / "home")
        from sqlalchemy import select

        from app.core.base.schema import AgentSession, MessageRow
        from app.core.base.store import Store
        from app.core.capture.ingest import Ingestor
        from app.core.capture.rows import parts_of
        from app.core.importer import import_paths

        store = Store(tmp / "s.db")
        import_paths(Ingestor(store), [FOLDER])
        per: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # source path -> [main branch, abandoned]
        with store.session() as db:
            source = dict(db.execute(select(AgentSession.id, AgentSession.source_path)).all())
            for row in db.scalars(select(MessageRow)):
                calls = sum(p.kind == "tool_call" for p in parts_of(row))
                per[source[row.session_id]][0 if row.branch == 0 else 1] += calls
        store.close()
    with (FOLDER / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    total = main = apart = 0
    for r in rows:
        expected = int(re.search(r"tool_calls=(\d+)", r["notes"]).group(1))
        on_main, off = per.get(str((FOLDER / r["local_path"]).resolve()), [0, 0])
        total, main, apart = total + expected, main + on_main, apart + off
        if on_main != expected:
            print(f"{r['local_path']}: MANIFEST {expected}, main branch {on_main}, abandoned branches {off}")
    print(f"MANIFEST {total}; stored on main branches {main} + on abandoned branches {apart} = {main + apart}")


if __name__ == "__main__":
    main()

"""One-shot imports of files and folders (CLI `capture import`, drops on the window): transcripts or datasets."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sqlalchemy import insert

from app.core.base.schema import DatasetFile, ImportRow, QuarantineRow, utcnow
from app.core.capture.ingest import Ingestor, IngestResult
from app.core.datafiles.dropped import DatasetCheck, check_dataset, looks_like_dataset

SUFFIXES = (".jsonl", ".json")
Progress = Callable[[int, int, Path], None]


@dataclass
class ImportReport:
    transcripts: list[IngestResult] = field(default_factory=list)
    datasets: list[DatasetCheck] = field(default_factory=list)
    unchanged: int = 0  # transcripts already stored as they are

    def counts(self) -> tuple[int, int, int, int]:
        """(lines in, stored, quarantined, skipped) over everything imported."""
        t = [(r.lines_in, r.stored, r.quarantined, r.skipped) for r in self.transcripts]
        d = [(c.lines, c.records, len(c.problems), c.blank) for c in self.datasets]
        return tuple(sum(x) for x in zip(*(t + d))) if t or d else (0, 0, 0, 0)  # type: ignore[return-value]

    def refused(self) -> list[str]:
        return [r.message for r in self.transcripts if r.status in ("refused", "error")] + \
               [c.reason for c in self.datasets if not c.accepted]


def expand(paths: list[str | Path]) -> list[Path]:
    """Files as given, and every .jsonl/.json file under the folders given (sorted)."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
        else:
            out.append(path)
    return list(dict.fromkeys(out))


def import_paths(ingestor: Ingestor, paths: list[str | Path], origin: str = "import",
                 progress: Progress | None = None) -> ImportReport:
    """Import each file: a dataset is checked and registered, anything else is ingested as a finished transcript."""
    report, files = ImportReport(), expand(paths)
    datasets = [p for p in files if p.is_file() and looks_like_dataset(p)]
    for index, path in enumerate(datasets, 1):
        report.datasets.append(register_dataset(ingestor, check_dataset(path), origin))
        if progress:
            progress(index, len(files), path)
    taken = set(datasets)
    transcripts = [p for p in files if p not in taken]
    missing = [p for p in transcripts if not p.exists()]
    report.transcripts += [ingestor.fail(p, None, origin, "no such file") for p in missing]
    step = (lambda i, _n, path: progress(len(datasets) + i, len(files), path)) if progress else None
    for result in ingestor.ingest_many([p for p in transcripts if p.exists()], origin, final=True, progress=step):
        if result is None:
            report.unchanged += 1
        else:
            report.transcripts.append(result)
    return report


def register_dataset(ingestor: Ingestor, check: DatasetCheck, origin: str) -> DatasetCheck:
    """Record the verdict (datasets + imports rows) and quarantine the records that failed the QUICK checks."""
    shown = ingestor.scrubber.text(str(check.path))
    status = "ok" if check.accepted else "refused"
    with ingestor.store.engine.begin() as conn:
        import_id = conn.execute(insert(ImportRow).values(
            origin=origin, kind="dataset", agent=check.spec, path=shown, lines_in=check.lines, stored=check.records,
            quarantined=len(check.problems), skipped=check.blank, status=status, message=check.reason,
            created_at=utcnow())).inserted_primary_key[0]
        conn.execute(insert(DatasetFile).values(path=shown, sha256=check.sha256, spec=check.spec,
                                                accepted=int(check.accepted), reason=check.reason,
                                                records=check.records, problems=len(check.problems),
                                                created_at=utcnow()))
        rows = [dict(import_id=import_id, source_path=shown, line=n, reason=why, created_at=utcnow())
                for n, why in check.problems]
        if not check.accepted:
            rows.append(dict(import_id=import_id, source_path=shown, line=None, reason=check.reason,
                             created_at=utcnow()))
        if rows:
            conn.execute(insert(QuarantineRow), rows)
    return check

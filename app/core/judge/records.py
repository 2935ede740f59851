"""The model registry: run → checkpoint → eval → verdict → deployable. Resolving what a user names
("base", a checkpoint id, a job id, a checkpoint folder) as a Target, the evals and verdicts recorded for it (what is
deployed: judge/deployment)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from app.core.base import settings
from app.core.base.errors import Explained
from app.core.base.fingerprint import sha256_file
from app.core.base.schema import CheckpointRow, EvalRow, Job, Run, VerdictRow
from app.core.base.store import Store
from app.core.judge.gate import SETTING, Thresholds
from app.core.judge.report import FORMAT, LOSSES
from app.core.train.spec import JobSpec


class JudgeError(Explained):
    """A judging step that cannot be done: what, why, what to do (one sentence each)."""


@dataclass
class Target:
    """A model to evaluate: the base model alone (checkpoint None) or base + a registered checkpoint's adapter."""

    base_model: str
    checkpoint: CheckpointRow | None = None
    job: Job | None = None
    spec: JobSpec | None = None

    @property
    def is_base(self) -> bool:
        return self.checkpoint is None

    @property
    def id(self) -> int | None:
        return self.checkpoint.id if self.checkpoint else None

    @property
    def adapter(self) -> str | None:
        return self.checkpoint.path if self.checkpoint else None

    @property
    def label(self) -> str:
        if self.checkpoint is None:
            return "base"
        what = "final" if self.checkpoint.kind == "adapter" else f"step {self.checkpoint.step}"
        return f"#{self.checkpoint.id} {self.job.id if self.job else '?'} {what}"

    @property
    def file_stem(self) -> str:
        """The stem of its GGUF files (exports, and the f16 judged through llama.cpp): the name embedded in them."""
        return stem_of(self.base_model, self.id)

    def adapter_sha256(self) -> str | None:
        if self.checkpoint is None:
            return None
        if self.checkpoint.sha256:
            return self.checkpoint.sha256
        marker = Path(self.checkpoint.path) / "nightschool-checkpoint.json"
        return sha256_file(marker) if marker.is_file() else None


def stem_of(base_model: str, checkpoint_id: int | None) -> str:
    """Export file names: <base model>-ck<ID>, or <base model>-base."""
    base = re.sub(r"[^a-z0-9]+", "-", Path(base_model).name.lower()).strip("-") or "model"
    return f"{base}-ck{checkpoint_id}" if checkpoint_id else f"{base}-base"


def _target_of(store: Store, row: CheckpointRow) -> Target:
    with store.session() as s:
        run = s.get(Run, row.run_id)
        job = s.get(Job, run.job_id)
    spec, _ = JobSpec.read(Path(job.spec_path))
    if not Path(row.path).is_dir():
        raise JudgeError(f"checkpoint #{row.id} is gone from disk", why=f"{row.path} does not exist",
                         fix="pick another checkpoint (retention may have removed it)")
    return Target(spec.model, row, job, spec)


def _unknown(ref: str | int) -> JudgeError:
    return JudgeError(f"no registered checkpoint {str(ref)!r}",
                      why="checkpoints are registered when their job's result validates",
                      fix="name one from `nightschool lineage` / the Judge tab: '#ID', a job id, or 'base'")


def by_id(store: Store, checkpoint_id: int) -> Target:
    """A registered checkpoint by its id."""
    with store.session() as s:
        row = s.get(CheckpointRow, checkpoint_id)
    if row is None:
        raise _unknown(checkpoint_id)
    return _target_of(store, row)


def _final_row(s, job_id: str) -> CheckpointRow | None:
    return s.scalar(select(CheckpointRow).join(Run).where(Run.job_id == job_id, CheckpointRow.kind == "adapter")
                    .order_by(CheckpointRow.id.desc()))


def of_job(store: Store, job_id: str) -> Target:
    """A job's final adapter."""
    with store.session() as s:
        row = _final_row(s, job_id)
    if row is None:
        raise _unknown(job_id)
    return _target_of(store, row)


def resolve(store: Store, ref: str, base_model: str | None = None) -> Target:
    """What a user names, for the CLI, the window and MCP: 'base' (or 'base:MODEL'), '#12' / '12' (a checkpoint id),
    a job id (its final adapter), a checkpoint folder. The core takes the Target."""
    ref = ref.strip()
    if ref == "base" or ref.startswith("base:"):
        return Target(ref.split(":", 1)[1] if ":" in ref else (base_model or "default"))
    with store.session() as s:
        row = None
        if ref.lstrip("#").isdigit():
            row = s.get(CheckpointRow, int(ref.lstrip("#")))
        if row is None:
            row = _final_row(s, ref)
        if row is None and Path(ref).expanduser().exists():
            path = str(Path(ref).expanduser().resolve())
            row = s.scalar(select(CheckpointRow).where(CheckpointRow.path.in_([ref, path]))
                           .order_by(CheckpointRow.id.desc()))
    if row is None:
        raise _unknown(ref)
    return _target_of(store, row)


def all_checkpoints(store: Store) -> list[Target]:
    """Every registered checkpoint still on disk, newest first."""
    with store.session() as s:
        rows = list(s.scalars(select(CheckpointRow).order_by(CheckpointRow.id.desc())))
    out = []
    for row in rows:
        try:
            out.append(_target_of(store, row))
        except (JudgeError, OSError, ValueError):
            continue
    return out


# --- evals and verdicts -------------------------------------------------------------------------------------------

def _has_evidence(report: Path) -> bool:
    """The report exists, is of the current format and has its per-example loss file beside it."""
    try:
        fmt = json.loads(report.read_text(encoding="utf-8")).get("format", 1)
    except (OSError, ValueError, AttributeError):
        return False
    return fmt >= FORMAT and report.with_name(LOSSES).is_file()


def cached_eval(store: Store, target: Target, eval_set_sha256: str | None, settings_sha256: str) -> EvalRow | None:
    """The target's newest evaluation with these settings on this held-out set (None: on any set — what an
    evaluation of a grown set reuses example by example), with its per-example evidence and the same adapter."""
    with store.session() as s:
        q = select(EvalRow).where(EvalRow.settings_sha256 == settings_sha256, EvalRow.base_model == target.base_model)
        if eval_set_sha256 is not None:
            q = q.where(EvalRow.eval_set_sha256 == eval_set_sha256)
        q = q.where(EvalRow.checkpoint_id.is_(None)) if target.is_base else q.where(
            EvalRow.checkpoint_id == target.id)
        row = s.scalar(q.order_by(EvalRow.id.desc()))
    if row is not None and not _has_evidence(Path(row.report_path)):
        return None  # gone, or from before the per-example files the gate pairs: evaluate again
    if row is not None and not target.is_base and row.adapter_sha256 != target.adapter_sha256():
        return None  # the checkpoint changed on disk since
    return row


def evals_of(store: Store, target: Target) -> list[EvalRow]:
    with store.session() as s:
        q = select(EvalRow).where(EvalRow.base_model == target.base_model)
        q = q.where(EvalRow.checkpoint_id.is_(None)) if target.is_base else q.where(
            EvalRow.checkpoint_id == target.id)
        return list(s.scalars(q.order_by(EvalRow.id.desc())))


def verdicts_of(store: Store, checkpoint_id: int) -> list[VerdictRow]:
    with store.session() as s:
        return list(s.scalars(select(VerdictRow).where(VerdictRow.checkpoint_id == checkpoint_id)
                              .order_by(VerdictRow.id.desc())))


def passing_verdict(store: Store, checkpoint_id: int) -> VerdictRow | None:
    """The newest verdict if it is a pass: a checkpoint is deployable only with one."""
    found = verdicts_of(store, checkpoint_id)
    return found[0] if found and found[0].verdict == "pass" else None


def thresholds(store: Store) -> Thresholds:
    """The gate's stored settings (older stored versions migrate on reading: `Thresholds._migrate`)."""
    stored = settings.get(store, SETTING)
    return Thresholds.model_validate(stored) if stored is not None else Thresholds()


def set_thresholds(store: Store, value: Thresholds) -> None:
    settings.put(store, SETTING, value.model_dump())


def verdict_reasons(row: VerdictRow) -> list[str]:
    return json.loads(row.reasons_json)

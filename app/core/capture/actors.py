"""Who acted in a captured session: the teacher, the school's own student (its served name, the names `nightschool
connect` set up, capture.json's `not_teachers`) or both (`mixed`), by the model each assistant message names.

Capture stores the facts (each message's `model`, the session's acting `models`) and the verdict (`actor`); the
verdict is derived again, for every stored session at once, whenever the names change (`classified`)."""
from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.base import paths
from app.core.base.errors import Explained
from app.core.base.files import atomic_write
from app.core.capture.session import MODELS_SEP, Session
from app.core.capture.sources import CaptureConfig

if TYPE_CHECKING:
    from app.core.base.store import Store

TEACHER, STUDENT, MIXED = "teacher", "student", "mixed"
SERVED_MODEL = "nightschool"  # the one name the served student answers to (/v1/models; ship/serving re-exports it)
SERVED_NAMES = (SERVED_MODEL,)
REMEMBERED = "students.json"  # in the data dir: the model names `nightschool connect` gave the tools, kept for good
CLASSIFIED = "capture.students"  # settings key: the names every stored session's `actor` was last derived with
SEP = MODELS_SEP
BATCH = 500


class StudentsError(Explained, ValueError):
    """The list of the student's names cannot be read: which file, why, what to do."""


@dataclass(frozen=True)
class Students:
    """The names (fnmatch patterns, lower case) whose work is the student's. A model is the student's when its whole
    name or its last `/` part matches one: aider names it `openai/nightschool`, opencode `nightschool/nightschool`."""

    patterns: tuple[str, ...]

    def student(self, model: str | None) -> bool:
        name = (model or "").strip().lower()
        if not name:
            return False  # a message that names no model: the teacher's, as everything stored before
        forms = {name, name.rsplit("/", 1)[-1]}
        return any(fnmatchcase(form, pattern) for form in forms for pattern in self.patterns)

    def actor(self, models: Iterable[str] | str | None) -> str:
        """teacher (no model of the student's acted), student (only the student's) or mixed."""
        names = split(models) if models is None or isinstance(models, str) else list(models)
        mine = [self.student(m) for m in names]
        return MIXED if any(mine) and not all(mine) else STUDENT if mine and all(mine) else TEACHER

    @property
    def key(self) -> str:
        return hashlib.sha256("\n".join(self.patterns).encode()).hexdigest()[:16]


def split(models: str | None) -> list[str]:
    return [m for m in (models or "").split(SEP) if m]


def mark(session: Session, students: Students) -> None:
    """Set who acted in the session and in each of its sub-agents (capture/prepare, before the rows are made)."""
    session.actor = students.actor(session.acting_models())
    for sub in session.subagents:
        mark(sub, students)


def _remembered_file(create: bool = False) -> Path:
    return paths.data_dir(create) / REMEMBERED


def remembered() -> list[str]:
    """The names `nightschool connect` set up in a tool (they stay the student's after a disconnect: the sessions of
    that time are still its work)."""
    path = _remembered_file()
    try:
        names = json.loads(path.read_text(encoding="utf-8")).get("names", [])
    except FileNotFoundError:
        return []
    except (OSError, ValueError, AttributeError) as exc:
        raise StudentsError(f"the student's names in {path} cannot be read", why=str(exc),
                            fix=f"delete {path}: `nightschool connect` writes it again") from exc
    return [n for n in names if isinstance(n, str)]


def remember(names: Iterable[str]) -> list[str]:
    """Add model names a tool was set up to ask for (ship/connect, on connect); returns every remembered name."""
    known = remembered()
    fresh = [n.strip() for n in names if n.strip() and n.strip() not in known]
    if fresh:
        atomic_write(_remembered_file(create=True), json.dumps({"names": known + fresh}, indent=1))
    return known + fresh


def students(config: CaptureConfig | None = None) -> Students:
    """The served names, the remembered ones and capture.json's `not_teachers` (`config`, else the saved one)."""
    config = config if config is not None else CaptureConfig.load()
    names = {n.strip().lower() for n in (*SERVED_NAMES, *remembered(), *config.not_teachers) if n.strip()}
    return Students(tuple(sorted(names)))


def current(store: Store) -> Students:
    """The student's names now (capture.json read again), every stored session's verdict brought in line with them."""
    names = students()
    classified(store, names)
    return names


def classified(store: Store, names: Students) -> int:
    """Every stored session's `actor` derived again when the names changed since the last time (a capture.json entry,
    a connected tool; the first time after migration 0017): one pass over the distinct `models` values, not over the
    sessions. A session whose verdict changes counts as stored again (its updated_at moves: builds and counts read it
    anew). Returns how many changed."""
    from sqlalchemy import select, update  # here, as in counts: a prepare worker marks sessions without the store

    from app.core.base import settings
    from app.core.base.schema import AgentSession

    if settings.get(store, CLASSIFIED) == names.key:
        return 0
    changed = 0
    with store.session() as db:
        values = db.scalars(select(AgentSession.models).where(AgentSession.models.is_not(None)).distinct()).all()
        by_actor: dict[str, list[str]] = defaultdict(list)
        for value in values:
            by_actor[names.actor(value)].append(value)
        for actor, group in by_actor.items():
            for start in range(0, len(group), BATCH):
                changed += db.execute(update(AgentSession).where(
                    AgentSession.models.in_(group[start:start + BATCH]), AgentSession.actor != actor)
                    .values(actor=actor)).rowcount
    settings.put(store, CLASSIFIED, names.key)
    return changed


def counts(store: Store, names: Students | None = None) -> dict[str, int]:
    """Top-level sessions by who acted ({teacher, student, mixed}); `names`: brought up to date with them first."""
    from sqlalchemy import func, select

    from app.core.base.schema import AgentSession

    if names is not None:
        classified(store, names)
    with store.session() as db:
        total = db.scalar(select(func.count()).select_from(AgentSession).where(AgentSession.parent_id.is_(None)))
        apart = dict(db.execute(select(AgentSession.actor, func.count()).where(
            AgentSession.parent_id.is_(None), AgentSession.actor.in_((STUDENT, MIXED)))
            .group_by(AgentSession.actor)).all())
    out = {TEACHER: int(total or 0) - sum(apart.values())}
    out.update({actor: int(apart.get(actor, 0)) for actor in (STUDENT, MIXED)})
    return out

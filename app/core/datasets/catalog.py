"""Built datasets in the store: earlier datasets of a base model, sessions they used and their splits, the held-out
set (it grows with every build, never shrinks) and registration of a finished build (fail-closed: a folder that does
not match its manifest, or would train on the held-out set, is refused)."""
from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import exists, or_, select

from app.core.base import files, paths
from app.core.base.errors import Explained
from app.core.base.fingerprint import sha256_file
from app.core.base.schema import AgentSession, BuiltDataset, DatasetSession, HeldOut
from app.core.base.store import Store
from app.core.datasets import manifest


class RegistrationError(Explained):
    """A build that cannot be registered: what, why, what to do."""


@dataclass
class Registered:
    dataset: BuiltDataset
    identical_to: str | None = None  # name of an earlier dataset with the same fingerprint (nothing new stored)


def datasets_dir() -> Path:
    path = paths.data_dir() / "datasets"
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_name(kind: str = "sft") -> str:
    return f"{kind}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


class Registry:
    def __init__(self, store: Store) -> None:
        self.store = store

    def all(self) -> list[BuiltDataset]:
        with self.store.session() as s:
            return list(s.scalars(select(BuiltDataset).order_by(BuiltDataset.id.desc())))

    def get(self, name: str) -> BuiltDataset | None:
        with self.store.session() as s:
            return s.scalar(select(BuiltDataset).where(BuiltDataset.name == name))

    def of_file(self, file: str | Path) -> BuiltDataset | None:
        """The built dataset a file belongs to (a job trained on `<dataset>/train.jsonl`), if any."""
        folder = Path(file).expanduser().resolve().parent
        return next((ds for ds in self.all() if Path(ds.path).resolve() == folder), None)

    def earlier(self, base_model: str, kind: str = "sft") -> list[BuiltDataset]:
        with self.store.session() as s:
            return list(s.scalars(select(BuiltDataset).where(BuiltDataset.base_model == base_model,
                                                             BuiltDataset.kind == kind).order_by(BuiltDataset.id)))

    def used(self, base_model: str, learned_from: Collection[str] | None = None,
             ids: Collection[str] | None = None) -> set[tuple[str, str]]:
        """(session id, content sha256) pairs an incremental build of this base model leaves out as already used:
        every held-out one (a test split's: read back, never trained on) and those in the train/val split of the
        datasets named in `learned_from` (None: of every earlier SFT dataset). The school names the datasets its
        cycles trained on (runtime.triggers.learned), so a dataset built by hand and never trained uses nothing up.
        With `ids`, those sessions' pairs (only theirs when they are FEW_IDS or fewer: what an incremental build read,
        so its cost grows with what is new)."""
        q = (select(DatasetSession.session_id, DatasetSession.content_sha256)
             .join(BuiltDataset, BuiltDataset.id == DatasetSession.dataset_id)
             .where(BuiltDataset.base_model == base_model, BuiltDataset.kind == "sft"))
        if learned_from is not None:
            q = q.where(or_(DatasetSession.split == "test", BuiltDataset.name.in_(list(learned_from))))
        with self.store.session() as s:
            return {(a, b) for part in _among(q, ids) for a, b in s.execute(part)}

    def used_clause(self, base_model: str, learned_from: Collection[str] | None = None):
        """A clause on AgentSession, true for a session `used` names (by id, whatever its content now): the SQL form,
        so a count over every stored session stays in the database."""
        q = (exists().where(DatasetSession.session_id == AgentSession.id)
             .where(BuiltDataset.id == DatasetSession.dataset_id, BuiltDataset.base_model == base_model,
                    BuiltDataset.kind == "sft"))
        if learned_from is not None:
            q = q.where(or_(DatasetSession.split == "test", BuiltDataset.name.in_(list(learned_from))))
        return q

    def unchanged_since_used(self, base_model: str, learned_from: Collection[str] | None = None):
        """As `used_clause`, for a session stored before the dataset using it was built: an incremental build need
        not read it (one stored again since may have grown: it is read, and compared by content). Keeps the build's
        cost with what is new, not with what is stored."""
        return self.used_clause(base_model, learned_from).where(AgentSession.updated_at < BuiltDataset.created_at)

    def corrections_used(self, base_model: str, learned_from: Collection[str] | None = None) -> set[int]:
        """Ids of the corrections earlier SFT datasets of this base model hold (their manifests list them apart);
        with `learned_from`, only those datasets' (as `used`)."""
        with self.store.session() as s:
            q = select(BuiltDataset.manifest_json).where(BuiltDataset.base_model == base_model,
                                                         BuiltDataset.kind == "sft")
            if learned_from is not None:
                q = q.where(BuiltDataset.name.in_(list(learned_from)))
            return {c["correction_id"] for text in s.scalars(q)
                    for c in json.loads(text or "{}").get("corrections", [])}

    def heldout(self, base_model: str) -> frozenset[str]:
        """The sessions held out for this base model so far: no dataset of it trains on them, ever."""
        with self.store.session() as s:
            return frozenset(s.scalars(select(HeldOut.session_id).where(HeldOut.base_model == base_model)))

    def heldout_by(self, base_model: str) -> dict[str, str]:
        """Held-out session id -> the name of the dataset that held it out ("" when that dataset is gone)."""
        with self.store.session() as s:
            rows = s.execute(select(HeldOut.session_id, BuiltDataset.name)
                             .join(BuiltDataset, BuiltDataset.id == HeldOut.dataset_id, isouter=True)
                             .where(HeldOut.base_model == base_model))
            return {sid: name or "" for sid, name in rows}

    def prior_splits(self, base_model: str, ids: Collection[str] | None = None) -> dict[str, str]:
        """Session id -> the split earlier SFT datasets of this base model gave it; train/val (the newest) wins over
        test, so a session any build trained or validated on is never held out later. With `ids`, theirs (only theirs
        when few, as `used`)."""
        out: dict[str, str] = {}
        q = (select(DatasetSession.session_id, DatasetSession.split)
             .join(BuiltDataset, BuiltDataset.id == DatasetSession.dataset_id)
             .where(BuiltDataset.base_model == base_model, BuiltDataset.kind == "sft").order_by(BuiltDataset.id))
        with self.store.session() as s:
            for part in _among(q, ids):  # a session's rows all come in one part, in dataset order
                for sid, split in s.execute(part):
                    if split != "test" or sid not in out:
                        out[sid] = split
        return out

    def current_heldout(self, base_model: str) -> BuiltDataset | None:
        """The current held-out set of a base model: the newest SFT dataset of it with a test split (each build's
        test split holds every session held out so far)."""
        with self.store.session() as s:
            return s.scalar(select(BuiltDataset).where(BuiltDataset.base_model == base_model,
                                                       BuiltDataset.kind == "sft", BuiltDataset.test > 0)
                            .order_by(BuiltDataset.id.desc()))

    def sessions_of(self, dataset_id: int) -> list[DatasetSession]:
        with self.store.session() as s:
            return list(s.scalars(select(DatasetSession).where(DatasetSession.dataset_id == dataset_id)))

    def no_longer_stored(self, dataset_id: int) -> int:
        """How many sessions this dataset was built with are no longer stored (withdrawn by a team member, or
        deleted): the dataset still holds their examples; later builds cannot use them."""
        with self.store.session() as s:
            return len(s.scalars(select(DatasetSession.session_id).where(
                DatasetSession.dataset_id == dataset_id,
                ~exists().where(AgentSession.id == DatasetSession.session_id))).all())

    def built_with(self, session_ids: Collection[str]) -> list[str]:
        """The names of the datasets built with any of these sessions, oldest first."""
        ids, names = list(session_ids), {}
        with self.store.session() as s:
            for start in range(0, len(ids), 500):
                for name, created in s.execute(select(BuiltDataset.name, BuiltDataset.created_at).join(
                        DatasetSession, DatasetSession.dataset_id == BuiltDataset.id).where(
                        DatasetSession.session_id.in_(ids[start:start + 500]))):
                    names[name] = created
        return sorted(names, key=lambda n: (names[n], n))

    def register(self, folder: Path, manifest_sha256: str) -> Registered:
        """Check the folder against its manifest and the held-out set, move it into place read-only, record it."""
        folder = Path(folder)
        if not (folder / manifest.MANIFEST).is_file() or sha256_file(folder / manifest.MANIFEST) != manifest_sha256:
            raise RegistrationError("the build's manifest is not the one the builder reported",
                                    why="it is missing or changed after the build", fix="build again")
        if problems := manifest.verify(folder):
            raise RegistrationError("the built files do not match their manifest", why="; ".join(problems[:5]),
                                    fix="build again")
        man = manifest.read(folder)
        self._check_heldout(man)
        if same := self._same(man):
            shutil.rmtree(folder, ignore_errors=True)
            return Registered(same, identical_to=same.name)
        if self.get(man.name):
            raise RegistrationError(f"a dataset named {man.name!r} already exists", fix="choose another name")
        target = datasets_dir() / man.name
        if target.exists():
            raise RegistrationError(f"{target} already exists", fix="choose another name or move that folder away")
        files.replace(folder, target)
        _read_only(target)
        return Registered(self._insert(man, target))

    def _same(self, man: manifest.Manifest) -> BuiltDataset | None:
        with self.store.session() as s:
            return s.scalar(select(BuiltDataset).where(BuiltDataset.fingerprint == man.fingerprint,
                                                       BuiltDataset.base_model == man.base_model,
                                                       BuiltDataset.kind == man.kind))

    def _check_heldout(self, man: manifest.Manifest) -> None:
        frozen = self.heldout(man.base_model)
        leaked = sorted({u.id for u in man.sessions if u.split in ("train", "val") and u.id in frozen})
        if leaked:
            raise RegistrationError("the build would train on the held-out set",
                                    why=f"{len(leaked)} held-out session(s) in train/val, e.g. {leaked[0]}",
                                    fix="this is a bug in the builder; the dataset was not registered")
        prior = self.prior_splits(man.base_model) if man.kind == "sft" else {}
        trained = sorted(sid for sid in man.heldout_added if prior.get(sid) in ("train", "val"))
        if trained:
            raise RegistrationError("the build would hold out a session an earlier dataset trained on",
                                    why=f"{len(trained)} session(s), e.g. {trained[0]}, were in an earlier "
                                        f"train/val split: they cannot measure what the model did not see",
                                    fix="this is a bug in the builder; the dataset was not registered")

    def _insert(self, man: manifest.Manifest, target: Path) -> BuiltDataset:
        size = {k: v.examples for k, v in man.splits.items()}
        row = BuiltDataset(name=man.name, kind=man.kind, base_model=man.base_model, fingerprint=man.fingerprint,
                           spec_id=man.spec_id, template_sha256=man.template_sha256, path=str(target), mode=man.mode,
                           examples=man.examples, train=size.get("train", 0), val=size.get("val", 0),
                           test=size.get("test", 0), excluded=man.counts.get("excluded", 0),
                           manifest_json=man.model_dump_json())
        with self.store.session() as s:
            s.add(row)
            s.flush()
            s.add_all([DatasetSession(dataset_id=row.id, session_id=u.id, split=u.split, examples=u.examples,
                                      content_sha256=u.content_sha256) for u in man.sessions])
            known = set(s.scalars(select(HeldOut.session_id).where(HeldOut.base_model == man.base_model)))
            s.add_all([HeldOut(base_model=man.base_model, session_id=sid, dataset_id=row.id)
                       for sid in man.heldout_added if sid not in known])
        return row


def _read_only(folder: Path) -> None:
    """A built dataset is immutable: its files lose their write bits."""
    for p in folder.iterdir():
        if p.is_file():
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


IDS_PER_QUERY = 500  # session ids bound in one IN (under every SQLite's variable limit)
FEW_IDS = 5000  # beyond this many, one read of every row costs less than the probes


def _among(q, ids: Collection[str] | None) -> list:
    """The query as is (ids None, or too many to probe), else one query per slice of ids, each restricted to them."""
    if ids is None or len(ids) > FEW_IDS:
        return [q]
    ids = sorted(ids)
    return [q.where(DatasetSession.session_id.in_(ids[i:i + IDS_PER_QUERY]))
            for i in range(0, len(ids), IDS_PER_QUERY)]

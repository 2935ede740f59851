"""The SQLite store: engine with WAL, Alembic upgrade on open, sessions."""
from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from app.core.base import paths

MIGRATIONS = Path(__file__).with_name("migrations")


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url)
    return cfg


class Store:
    """One SQLite database: opened, migrated to head, handing out ORM sessions."""

    def __init__(self, db_file: Path | None = None) -> None:
        self.path = Path(db_file) if db_file else paths.db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.url = f"sqlite:///{self.path}"
        self.engine: Engine = create_engine(self.url)
        event.listen(self.engine, "connect", _sqlite_pragmas)
        self.migrate()
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def migrate(self) -> None:
        cfg = alembic_config(self.url)
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on error."""
        with self._sessions() as sess:
            try:
                yield sess
                sess.commit()
            except BaseException:
                sess.rollback()
                raise

    def watch(self, mark: str | None = None) -> StoreWatch:
        """A change signal for a view of this store (see StoreWatch)."""
        return StoreWatch(self.path, mark)

    def close(self) -> None:
        self.engine.dispose()


class StoreWatch:
    """Has the store changed since the last look, whoever committed (this process, the CLI, the daemon)?

    One long-lived connection asks SQLite's `PRAGMA data_version`, which moves when any other connection commits
    (microseconds, no table read); only then is `mark` run — one row saying what a view shows (e.g. the newest
    import's id) — so a view re-reads only when its own tables changed. Every statement is read to its end, so no
    read transaction stays open to hold the WAL back. Use it from the thread that made it; `changed()` after a
    failure says True (the view's own read then says what is wrong)."""

    def __init__(self, path: Path, mark: str | None = None) -> None:
        self.mark = mark
        self._con: sqlite3.Connection | None = sqlite3.connect(path, timeout=1.0, isolation_level=None)
        self._version, self._last = self._look()

    def _look(self) -> tuple[object, object]:
        version = self._con.execute("PRAGMA data_version").fetchall()
        return version, (self._con.execute(self.mark).fetchall() if self.mark else version)

    def changed(self) -> bool:
        if self._con is None:
            return False
        try:
            version = self._con.execute("PRAGMA data_version").fetchall()
            if version == self._version:
                return False
            self._version = version
            last = self._con.execute(self.mark).fetchall() if self.mark else version
        except sqlite3.Error:
            return True
        if last == self._last:
            return False
        self._last = last
        return True

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

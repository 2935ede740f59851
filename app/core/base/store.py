"""The store: SQLite (WAL) by default, PostgreSQL when a URL names one; Alembic upgrade on open, sessions, locks."""
from __future__ import annotations

import os
import sqlite3
from collections import namedtuple
from contextlib import contextmanager
from functools import lru_cache
from operator import itemgetter
from pathlib import Path
from typing import Any, Iterator

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, LargeBinary, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from app.core.base import paths
from app.core.base.errors import Explained

MIGRATIONS = Path(__file__).with_name("migrations")
URL_ENV = "NIGHTSCHOOL_DATABASE_URL"  # e.g. postgresql+psycopg://user@host/nightschool
URL_FILE = "database_url"  # the same, one line in the config dir (the env var wins)
LOCKS = {"migrate": 7001, "queue": 7002, "cycles": 7003, "pending": 7004}  # advisory lock keys (PostgreSQL)


class StoreError(Explained, RuntimeError):
    """The store named cannot be opened."""


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
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def database_url() -> str | None:
    """The database the user named (NIGHTSCHOOL_DATABASE_URL, else `database_url` in the config dir); None: the
    SQLite file in the data dir."""
    named = os.environ.get(URL_ENV, "").strip()
    if not named:
        file = paths.config_dir() / URL_FILE
        named = file.read_text().strip() if file.is_file() else ""
    return named or None


def store_address() -> str:
    """The store in use as another process names it (`--db`): the URL the user named (without its password), else
    the data dir's SQLite file."""
    named = database_url()
    return make_url(pg_url(named))._replace(password=None).render_as_string() if named else str(paths.db_path())


def is_url(where: str | Path) -> bool:
    return isinstance(where, str) and "://" in where


def pg_url(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL with the psycopg (v3) driver; refuses anything else, saying why."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy's ArgumentError and friends
        raise StoreError(f"{url!r} is not a database URL", why=str(exc),
                         fix="write it as postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE") from None
    if parsed.get_backend_name() != "postgresql":
        raise StoreError(f"{parsed.render_as_string()} is not a PostgreSQL URL",
                         why="the store is SQLite (a file) or PostgreSQL (a URL)",
                         fix="write it as postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE, or unset "
                             f"{URL_ENV} for the SQLite file")
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def _with_password(url: str) -> str:
    """A URL given without its password gets the one of the URL the user named for the same server and user."""
    given, named = make_url(url), database_url()
    if given.password is None and named and is_url(named):
        full = make_url(pg_url(named))
        if full._replace(password=None) == given:
            return full.render_as_string(hide_password=False)
    return url


MARKS = {"qmark": "?", "format": "%s", "pyformat": "%s"}  # a driver's positional placeholder (sqlite3, psycopg)


def driver_execute(conn: Any, sql: str, params: tuple | list = ()) -> None:
    """One statement on the DB-API connection under a SQLAlchemy Connection, in its transaction: `sql` written with
    `{}` for each placeholder (filled with the driver's own). Far less Python per statement than conn.execute (a scan
    writes several per session: bench/README.md "Ingest")."""
    cursor = conn.connection.driver_connection.cursor()
    try:
        cursor.execute(sql.format(*[MARKS[conn.dialect.paramstyle]] * sql.count("{}")), params)
    finally:
        cursor.close()


def driver_rows(conn: Any, table: Any, keys: tuple[str, ...], where: str, params: tuple | list = ()) -> list[Any]:
    """SELECT columns of a Core table on the driver's own cursor, in the Connection's transaction (what driver_execute
    is to a write): `where` (and an ORDER BY after it) written with `{}` for each placeholder; each row a named tuple
    of the values SQLAlchemy would read (a DateTime on SQLite: a datetime). A scan reads several per session."""
    quote = conn.dialect.identifier_preparer.quote
    sql = f"SELECT {', '.join(map(quote, keys))} FROM {quote(table.name)} WHERE {where}"
    cursor = conn.connection.driver_connection.cursor()
    try:
        cursor.execute(sql.format(*[MARKS[conn.dialect.paramstyle]] * sql.count("{}")), params)
        got = cursor.fetchall()
        kinds = tuple(d[1] for d in cursor.description)  # the driver's type codes (None on SQLite)
    finally:
        cursor.close()
    processors, row = _read_columns(conn.dialect, table, keys, kinds)
    if any(processors):
        return [row._make(v if f is None or v is None else f(v) for f, v in zip(processors, r)) for r in got]
    return [row._make(r) for r in got]


def marks(n: int) -> str:
    """`{}` placeholders for an IN list of n values (driver_rows and driver_execute fill them)."""
    return ", ".join(["{}"] * n)


@lru_cache(maxsize=256)
def _read_columns(dialect: Any, table: Any, keys: tuple[str, ...], kinds: tuple) -> tuple[list[Any], Any]:
    """Each column's result processor for the dialect and the driver's type code (as SQLAlchemy's own results make
    them), and a named tuple type for the rows."""
    processors = [table.c[key].type.dialect_impl(dialect).result_processor(dialect, kind)
                  for key, kind in zip(keys, kinds)]
    return processors, namedtuple(f"{table.name}_row", keys)


@lru_cache(maxsize=256)
def _columns(dialect: Any, table: Any, keys: tuple[str, ...]) -> tuple[list[str], list[Any]]:
    """The quoted names of a table's columns, and each one's bind processor for the dialect (None: the value goes as
    it is; LargeBinary's only wraps bytes in the driver's Binary, so bytes go as they are)."""
    quote, processors = dialect.identifier_preparer.quote, []
    for key in keys:
        kind = table.c[key].type
        processors.append(None if isinstance(kind, LargeBinary) else kind.dialect_impl(dialect).bind_processor(dialect))
    return [quote(k) for k in keys], processors


def _values(dialect: Any, table: Any, keys: tuple[str, ...], rows: list[dict[str, Any]] | list[tuple],
            given: bool = False) -> list[tuple]:
    """Each row's values in the order of `keys` (`given`: the rows are tuples in that order already)."""
    get, processors = itemgetter(*keys), _columns(dialect, table, keys)[1]
    values = rows if given else [get(row) for row in rows] if len(keys) > 1 else [(row[keys[0]],) for row in rows]
    if any(processors):  # a DateTime on SQLite: the text SQLAlchemy would write
        values = [tuple(v if f is None or v is None else f(v) for f, v in zip(processors, row)) for row in values]
    return values


def insert_many(conn: Any, table: Any, rows: list[dict[str, Any]] | list[tuple], returning: str | None = None,
                keys: tuple[str, ...] | None = None) -> Any:
    """INSERT rows (dicts with the same keys; or tuples of the columns named by `keys`) into a Core table with one
    executemany on the driver's own cursor, in the Connection's transaction, without `conn.execute(insert(table),
    rows)` building each row's parameters in Python (the real fixtures' 6 211 message rows: 0.10 s instead of
    0.12-0.13 s; bench/README.md "Ingest"). A column whose type the dialect processes (SQLite's DateTime) gets the
    value SQLAlchemy would write. `returning`: one row, and that column of it back (a new row's id)."""
    if not rows:
        return None
    given, keys = keys is not None, keys or tuple(rows[0])
    names, _ = _columns(conn.dialect, table, keys)
    mark = MARKS[conn.dialect.paramstyle]
    quote = conn.dialect.identifier_preparer.quote
    sql = f"INSERT INTO {quote(table.name)} ({', '.join(names)}) VALUES ({', '.join([mark] * len(keys))})"
    values = _values(conn.dialect, table, keys, rows, given)
    cursor = conn.connection.driver_connection.cursor()
    try:
        if returning is None:
            cursor.executemany(sql, values)
            return None
        if len(values) != 1:
            raise ValueError("insert_many returns a column of one row only")
        cursor.execute(f"{sql} RETURNING {quote(returning)}", values[0])
        return cursor.fetchone()[0]
    finally:
        cursor.close()


def update_row(conn: Any, table: Any, row_id: Any, values: dict[str, Any], key: str = "id") -> None:
    """UPDATE one row (by `key`) of a Core table on the driver's own cursor, processed as insert_many's values."""
    keys = tuple(values)
    names, _ = _columns(conn.dialect, table, keys)
    mark, quote = MARKS[conn.dialect.paramstyle], conn.dialect.identifier_preparer.quote
    sql = f"UPDATE {quote(table.name)} SET {', '.join(f'{n} = {mark}' for n in names)} WHERE {quote(key)} = {mark}"
    cursor = conn.connection.driver_connection.cursor()
    try:
        cursor.execute(sql, (*_values(conn.dialect, table, keys, [values])[0], row_id))
    finally:
        cursor.close()


class Store:
    """One database: opened, migrated to head, handing out ORM sessions. `where` is a SQLite file or a PostgreSQL
    URL; none: the URL the user named (database_url), else the data dir's SQLite file."""

    def __init__(self, where: Path | str | None = None) -> None:
        where = where if where not in (None, "") else (database_url() or paths.db_path())
        if is_url(where):
            self.path: Path | None = None
            self.url = _with_password(pg_url(str(where)))
            self.engine: Engine = create_engine(self.url, pool_pre_ping=True,
                                                connect_args={"options": "-c timezone=UTC"})
        else:
            self.path = Path(where)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.url = f"sqlite:///{self.path}"
            self.engine = create_engine(self.url)
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self.dialect = self.engine.dialect.name  # "sqlite" | "postgresql"
        self.migrate()
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def where(self) -> str:
        """What names this store to another process (a worker's spec, `--db`): the file, or the URL without its
        password (the process finds that where this one did: NIGHTSCHOOL_DATABASE_URL or the config dir's file)."""
        return str(self.path) if self.path is not None else make_url(self.url)._replace(password=None).render_as_string()

    @property
    def postgres(self) -> bool:
        return self.dialect == "postgresql"

    def migrate(self) -> None:
        cfg = alembic_config(self.url)
        try:
            with self.engine.begin() as conn:
                if self.postgres:  # two processes opening an empty database: one migrates, the other waits
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCKS["migrate"]})
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
        except Exception as exc:
            if self.postgres and type(exc).__name__ == "OperationalError":
                raise StoreError(f"the PostgreSQL store at {make_url(self.url).render_as_string()} cannot be opened",
                                 why=str(getattr(exc, "orig", exc)).strip().splitlines()[0],
                                 fix=f"start the server or correct {URL_ENV}") from None
            raise

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

    def lock(self, session: Session, name: str) -> None:
        """Serialise `name` (a claim) across processes until the session's transaction ends: PostgreSQL's
        transaction advisory lock. SQLite needs none: its one writer at a time already serialises claims."""
        if self.postgres:
            session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCKS[name]})

    def insert(self, table: Any):
        """The dialect's INSERT (with on_conflict_do_nothing / on_conflict_do_update) for table."""
        if self.postgres:
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        return insert(table)

    def watch(self, mark: str | None = None) -> StoreWatch:
        """A change signal for a view of this store (see StoreWatch)."""
        return StoreWatch(self.where, mark)

    def close(self) -> None:
        self.engine.dispose()


class StoreWatch:
    """Has the store changed since the last look, whoever committed (this process, the CLI, the daemon)?

    One long-lived connection asks a cheap version first — SQLite's `PRAGMA data_version`, which moves when any
    other connection commits (microseconds, no table read); on PostgreSQL the server's snapshot
    (`pg_current_snapshot()`: the next transaction id and those in progress, so it moves when a writing transaction
    starts and again when it ends) — and only then runs `mark`: one row saying what a view shows (e.g. the newest
    import's id), so a view re-reads only when its own tables changed. Every statement is read to its end (and
    PostgreSQL's connection is in autocommit), so no read transaction stays open. Use it from the thread that made
    it; `changed()` after a failure says True (the view's own read then says what is wrong)."""

    def __init__(self, where: Path | str, mark: str | None = None) -> None:
        self.mark = mark
        if is_url(where):
            import psycopg

            self._errors: tuple[type[BaseException], ...] = (psycopg.Error,)
            self._version_sql = "SELECT pg_current_snapshot()::text"
            plain = make_url(pg_url(str(where))).set(drivername="postgresql").render_as_string(hide_password=False)
            self._con: Any = psycopg.connect(plain, autocommit=True, connect_timeout=5)
        else:
            self._errors = (sqlite3.Error,)
            self._version_sql = "PRAGMA data_version"
            self._con = sqlite3.connect(where, timeout=1.0, isolation_level=None)
        self._version, self._last = self._look()

    def _read(self, sql: str) -> list:
        return self._con.execute(sql).fetchall()

    def _look(self) -> tuple[object, object]:
        version = self._read(self._version_sql)
        return version, (self._read(self.mark) if self.mark else version)

    def changed(self) -> bool:
        if self._con is None:
            return False
        try:
            version = self._read(self._version_sql)
            if version == self._version:
                return False
            self._version = version
            last = self._read(self.mark) if self.mark else version
        except self._errors:
            return True
        if last == self._last:
            return False
        self._last = last
        return True

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

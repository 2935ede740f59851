"""Moving a whole store to another database (a solo SQLite file to the team's PostgreSQL): every table copied in
dependency order in one transaction, sequences moved past the copied ids, then each table's count and a sample of
its rows compared."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from sqlalchemy import Table, func, select, text
from sqlalchemy.exc import DBAPIError

from app.core.base.schema import Base
from app.core.base.store import Store, StoreError

BATCH = 2000
SAMPLE = 5  # rows compared per table: the first, the last and some between, by primary key


@dataclass
class TableCount:
    table: str
    source: int
    target: int
    sampled: int = 0
    differing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.source == self.target and not self.differing


@dataclass
class Moved:
    source: str
    target: str
    tables: list[TableCount]

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tables)

    @property
    def rows(self) -> int:
        return sum(t.target for t in self.tables)


def tables() -> list[Table]:
    """Every table the migrations make, parents before the tables that refer to them."""
    return list(Base.metadata.sorted_tables)


def move(source: Store, target: Store, say: Callable[[str], None] = lambda _: None) -> Moved:
    """Copy every row of source into target (an empty store at the same migration); compare counts and samples."""
    _same_head(source, target)
    _empty(target)
    with source.engine.connect() as src, target.engine.begin() as dst:
        for table in tables():
            copied = _copy(table, src, dst)
            say(f"{table.name}: {copied} rows copied")
        if target.postgres:
            _sequences(dst)
    with source.engine.connect() as src, target.engine.connect() as dst:
        counts = [_compare(table, src, dst) for table in tables()]
    return Moved(source.where, _shown(target), counts)


def _shown(store: Store) -> str:
    from sqlalchemy.engine import make_url

    return store.where if store.path is not None else make_url(store.url).render_as_string(hide_password=True)


def _same_head(source: Store, target: Store) -> None:
    heads = []
    for store in (source, target):
        with store.engine.connect() as conn:
            heads.append(conn.execute(text("SELECT version_num FROM alembic_version")).scalar())
    if heads[0] != heads[1]:
        raise StoreError(f"the stores are at different migrations ({heads[0]} and {heads[1]})",
                         why="rows are copied table by table, so both must have the same tables",
                         fix="open both with this version of nightschool (each is upgraded when opened), then retry")


def _empty(target: Store) -> None:
    with target.engine.connect() as conn:
        full = [(t.name, n) for t in tables() if (n := conn.execute(select(func.count()).select_from(t)).scalar())]
    if full:
        listed = ", ".join(f"{name} ({n} rows)" for name, n in full[:5]) + (" …" if len(full) > 5 else "")
        raise StoreError(f"the target {_shown(target)} is not empty: {listed}",
                         why="a move copies every row with its id; rows already there would clash or mix two stores",
                         fix="name a new, empty database (createdb nightschool_team), or drop this one's tables")


def _copy(table: Table, src, dst) -> int:
    order = list(table.primary_key.columns) or list(table.columns)
    rows = src.execution_options(stream_results=True).execute(select(table).order_by(*order))
    copied = 0
    while batch := rows.fetchmany(BATCH):
        values = [dict(r._mapping) for r in batch]
        try:
            dst.execute(table.insert(), values)
        except DBAPIError as exc:
            first = values[0]
            key = {c.name: first[c.name] for c in order}
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise StoreError(f"copying {table.name} failed (in the {len(values)} rows from {key})",
                             why=f"the target refused them: {reason}",
                             fix="nothing was written to the target (one transaction); fix the rows named, or report "
                                 "the error, then run the move again") from None
        copied += len(values)
    return copied


def _sequences(dst) -> None:
    """PostgreSQL's serial ids go on after the copied ones (inserting ids by hand does not move a sequence)."""
    for table in tables():
        for column in table.primary_key.columns:
            if column.autoincrement is True or (column.autoincrement == "auto" and column.type.python_type is int
                                                and len(table.primary_key.columns) == 1):
                seq = dst.execute(text("SELECT pg_get_serial_sequence(:t, :c)"),
                                  {"t": table.name, "c": column.name}).scalar()
                if seq:
                    dst.execute(text(f'SELECT setval(:s, COALESCE((SELECT MAX("{column.name}") FROM "{table.name}"), '
                                     f'0) + 1, false)'), {"s": seq})


def _compare(table: Table, src, dst) -> TableCount:
    count = TableCount(table.name, src.execute(select(func.count()).select_from(table)).scalar() or 0,
                       dst.execute(select(func.count()).select_from(table)).scalar() or 0)
    order = list(table.primary_key.columns) or list(table.columns)
    if not count.source:
        return count
    step = max(1, count.source // SAMPLE)
    picks = list(range(0, count.source, step))[:SAMPLE] + [count.source - 1]
    for at in sorted(set(picks)):
        mine = src.execute(select(table).order_by(*order).offset(at).limit(1)).first()
        key = [mine._mapping[c.name] for c in order]
        theirs = dst.execute(select(table).where(*[c == k for c, k in zip(order, key)])).first()
        count.sampled += 1
        if theirs is None or _plain(mine._mapping) != _plain(theirs._mapping):
            count.differing.append(", ".join(f"{c.name}={k}" for c, k in zip(order, key)))
    return count


def _plain(row) -> dict:
    """A row as comparable values: SQLite gives back naive UTC times, PostgreSQL aware ones."""
    out = {}
    for name, value in row.items():
        if isinstance(value, datetime):
            value = (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
        out[name] = value
    return out

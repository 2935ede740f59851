"""Where a Claude Code file's records wait, numbered in file order, while its uuid tree is resolved (claude_tree): in
memory (`Held`), or for a huge file on disk (`OnDisk`: their ids in a temporary SQLite file, their messages in the
spill, a few integers per record in arrays), which keeps memory about the same whatever the file's size."""
from __future__ import annotations

import os
import sqlite3
import tempfile
from array import array
from collections.abc import Iterator, MutableSequence, Sequence
from itertools import accumulate

from app.core.capture.session import Message
from app.core.capture.spill import Spill, SpilledMessages

NONE: tuple[int, ...] = ()


def name(key: str | int) -> str:
    """A node's key as text: its uuid, or `line:<n>` for a record without one (its key is the line number, an int,
    so no uuid, whatever it holds, equals it or names it as a parent)."""
    return key if isinstance(key, str) else f"line:{key}"


class Held:
    """The records in memory: ids by dicts, messages as read."""

    def __init__(self) -> None:
        self.index: dict[str | int, int] = {}
        self.keys: list[str | int] = []
        self.fields: list[tuple[str | None, str | None, str | None, str | None]] = []  # parent, stamp, agent, api
        self.side = bytearray()
        self.held: list[list[Message]] = []
        self.call_ids: list[tuple[str, ...]] = []

    @property
    def n(self) -> int:
        return len(self.keys)

    def claim(self, key: str | int, parent: str | None, stamp: str | None, side: bool, agent: str | None,
              api: str | None) -> bool:
        """A node numbered next for the record with this key (its uuid, or its line number when it has none);
        False when a record took the key before."""
        if key in self.index:
            return False
        self.index[key] = len(self.keys)
        self.keys.append(key)
        self.fields.append((parent, stamp, agent, api))
        self.side.append(side)
        return True

    def fill(self, messages: list[Message], ids: tuple[str, ...]) -> None:
        """The messages of the node claimed last, and the call ids it made (a response's line) or answered."""
        self.held.append(messages)
        self.call_ids.append(ids)

    def resolve(self) -> Held:
        """Ids to numbers: parent, response and call numbers."""
        index, apis, calls = self.index, {}, {}
        self.parent = array("i", (index.get(f[0], -1) if f[0] else -1 for f in self.fields))
        self.api = array("i", (apis.setdefault(f[3], len(apis)) if f[3] else -1 for f in self.fields))
        self.numbers = [tuple(calls.setdefault(c, len(calls)) for c in ids) if ids else NONE for ids in self.call_ids]
        self.apis, self.calls = len(apis), len(calls)
        return self

    def ids(self, i: int) -> Sequence[int]:
        return self.numbers[i]

    def has(self, i: int) -> bool:
        return bool(self.held[i])

    def messages(self, i: int) -> list[Message]:
        return self.held[i]

    def key(self, i: int) -> str:
        return name(self.keys[i])

    def agent(self, i: int) -> str | None:
        return self.fields[i][2]

    def stamps(self) -> Iterator[tuple[int, str]]:
        return ((i, f[1]) for i, f in enumerate(self.fields) if f[1])

    def session_agent(self) -> str | None:
        """The first agentId in the file."""
        return next((f[2] for f in self.fields if f[2]), None)

    def sink(self) -> MutableSequence[Message]:
        return []

    def emit(self, out: MutableSequence[Message], i: int, k: int, message: Message, merged: bool) -> None:
        out.append(message)

    def close(self) -> None:
        """Nothing to let go of here."""


class OnDisk:
    """The records on disk: ids in a temporary SQLite file beside the spill (deleted when closed), messages in the
    spill, a node's place in the spill and its sidechain flag in arrays."""

    BATCH = 4096  # call ids inserted at a time

    def __init__(self, spill: Spill, cache_kib: int = 16 * 1024) -> None:
        self.spill = spill
        handle, self.path = tempfile.mkstemp(prefix="nightschool-tree-", suffix=".db", dir=spill.directory)
        os.close(handle)
        self.db = sqlite3.connect(self.path, isolation_level=None)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE", f"cache_size=-{cache_kib}"):
            self.db.execute(f"PRAGMA {pragma}")
        # key: a uuid, or NULL for a record without one, known by its line (never equal to a uuid or a parent)
        self.db.execute("CREATE TABLE node (i INTEGER PRIMARY KEY, key TEXT UNIQUE, line INTEGER, parent TEXT,"
                        " stamp TEXT, agent TEXT, api TEXT)")
        self.db.execute("CREATE TABLE call (i INTEGER NOT NULL, id TEXT NOT NULL)")
        self.db.execute("BEGIN")
        self.side, self.first = bytearray(), array("q")  # by node: on the sidechain, its first message's number
        self.at, self.size = array("q"), array("q")  # by message: its block in the spill
        self.pending: list[tuple[int, str]] = []

    @property
    def n(self) -> int:
        return len(self.side)

    def claim(self, key: str | int, parent: str | None, stamp: str | None, side: bool, agent: str | None,
              api: str | None) -> bool:
        n = len(self.side)
        uuid, line = (key, None) if isinstance(key, str) else (None, key)
        if not self.db.execute("INSERT OR IGNORE INTO node VALUES (?, ?, ?, ?, ?, ?, ?)",
                               (n, uuid, line, parent, stamp, agent, api)).rowcount:
            return False
        self.side.append(side)
        return True

    def fill(self, messages: list[Message], ids: tuple[str, ...]) -> None:
        self.first.append(len(self.at))  # its messages: from here to the next node's first
        for message in messages:
            at, size = self.spill.put_value(message)
            self.at.append(at)
            self.size.append(size)
        if ids:
            i = len(self.side) - 1
            self.pending += [(i, c) for c in ids]
            if len(self.pending) >= self.BATCH:
                self._flush()

    def _flush(self) -> None:
        self.db.executemany("INSERT INTO call VALUES (?, ?)", self.pending)
        self.pending = []

    def resolve(self) -> OnDisk:
        """Ids to numbers, by SQLite: a parent's node number; responses and calls numbered densely."""
        self._flush()
        n, db = self.n, self.db
        self.parent = array("i", [-1]) * n
        for i, p in db.execute("SELECT n.i, p.i FROM node n JOIN node p ON p.key = n.parent"):
            self.parent[i] = p
        for name, column, table in (("api_number", "api", "node"), ("call_number", "id", "call")):  # 0, 1, ...
            db.execute(f"CREATE TABLE {name} ({column} TEXT PRIMARY KEY, number INTEGER) WITHOUT ROWID")
            db.execute(f"INSERT INTO {name} SELECT {column}, row_number() OVER () - 1 FROM {table} "
                       f"WHERE {column} IS NOT NULL GROUP BY {column}")
        self.api = array("i", [-1]) * n
        for i, a in db.execute("SELECT n.i, f.number FROM node n JOIN api_number f ON f.api = n.api"):
            self.api[i] = a
        counts, self.numbers = array("i", [0]) * (n + 1), array("i")
        for i, c in db.execute("SELECT c.i, f.number FROM call c JOIN call_number f ON f.id = c.id ORDER BY c.rowid"):
            counts[i + 1] += 1
            self.numbers.append(c)
        self.apis, self.calls = (db.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
                                 for name in ("api_number", "call_number"))
        self.starts = array("i", accumulate(counts))
        return self

    def ids(self, i: int) -> Sequence[int]:
        start, end = self.starts[i], self.starts[i + 1]
        return self.numbers[start:end] if end > start else NONE

    def _messages(self, i: int) -> range:
        return range(self.first[i], self.first[i + 1] if i + 1 < len(self.first) else len(self.at))

    def has(self, i: int) -> bool:
        return len(self._messages(i)) > 0

    def messages(self, i: int) -> list[Message]:
        return [self.spill.value((self.at[m], self.size[m])) for m in self._messages(i)]

    def _one(self, sql: str, i: int) -> str | None:
        row = self.db.execute(sql, (i,)).fetchone()
        return row[0] if row else None

    def key(self, i: int) -> str:
        row = self.db.execute("SELECT key, line FROM node WHERE i = ?", (i,)).fetchone()
        return (row[0] if row[0] is not None else name(row[1])) if row else ""

    def agent(self, i: int) -> str | None:
        return self._one("SELECT agent FROM node WHERE i = ?", i)

    def stamps(self) -> Iterator[tuple[int, str]]:
        yield from self.db.execute("SELECT i, stamp FROM node WHERE stamp IS NOT NULL ORDER BY i")

    def session_agent(self) -> str | None:
        """The first agentId in the file."""
        row = self.db.execute("SELECT agent FROM node WHERE agent IS NOT NULL ORDER BY i LIMIT 1").fetchone()
        return row[0] if row else None

    def sink(self) -> MutableSequence[Message]:
        return SpilledMessages(self.spill)

    def emit(self, out: MutableSequence[Message], i: int, k: int, message: Message, merged: bool) -> None:
        """A message as read is not kept again: the sink points at its block."""
        if merged:
            out.append(message)
        else:
            m = self.first[i] + k
            out.refer((self.at[m], self.size[m]))

    def close(self) -> None:
        """The SQLite file is deleted (the messages stay in the spill, which the caller closes)."""
        self.db.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass  # gone already

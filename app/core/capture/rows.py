"""A parsed (and scrubbed) Session as rows for the sessions and messages tables, signals included; the one codec of
a message's parts (`pack_parts` writes them compressed in `parts_z`, `parts_of` / `parts_text` read every form).

The parts are 70-90 % of a store's bytes (bench/README.md "Space"), so they are kept compressed: `parts_z` holds an
LZ4 block of their compact JSON behind the byte `L` (about 0.6 of the JSON's size at several hundred MB/s both ways)
and `parts_json` is emptied. Migration 0014 and the rows written until 2026-11-27 hold zlib level 1 instead (0.44 of
the size, but compressing it was a sixth of an ingest: bench/README.md "Ingest"); a zlib stream starts with 0x78, so
the readers tell them apart. Rows written before 0014 had their JSON in `parts_json` and no `parts_z`; the readers
still take that form too (a team member's payload, a row a test or an older tool wrote). What travels between a
member and the team server stays the JSON text (`team/wire`), so the wire and its content sha are those of before
0014."""
from __future__ import annotations

import hashlib
import itertools
import json
import zlib
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

import lz4.block
import orjson

from app.core.base.clock import utcnow
from app.core.capture.behaviour import Tally
from app.core.capture.session import MODELS_SEP, Message, Part, Session, acting_model, is_request

TITLE_CHARS = 120


MESSAGE_COLUMNS = ("session_id", "branch", "seq", "role", "text", "parts_json", "parts_z", "tools", "is_error",
                   "timestamp", "model", "compact_summary", "meta", "line")  # a message row's values, in order


def session_rows(sid: str, session: Session, parent: str | None = None) -> tuple[list[dict], list[dict]]:
    """The session and its sub-agents (each its own row, linked by parent_id and spawned_by), and their messages."""
    sessions, messages = session_records(sid, session, parent)
    return sessions, [dict(zip(MESSAGE_COLUMNS, m)) for m in messages]


def session_records(sid: str, session: Session, parent: str | None = None) -> tuple[list[dict], Iterator[tuple]]:
    """session_rows with the message rows made one at a time as they are taken (a huge session's rows are never
    all in memory at once), each the tuple of its MESSAGE_COLUMNS (what the driver is given, and a prepare worker
    sends back: no dict per row)."""
    sessions, messages = [_session_row(sid, session, parent)], [_message_tuples(sid, session)]
    for sub in session.subagents:
        sub_id = hashlib.sha1(f"{sid}\0{sub.session_id}".encode()).hexdigest()[:20]
        more_sessions, more_messages = session_records(sub_id, sub, parent=sid)
        sessions += more_sessions
        messages.append(more_messages)
    return sessions, itertools.chain.from_iterable(messages)


def rekey(sessions: list[dict], messages: list[tuple], old: str, new: str) -> tuple[list[dict], Iterator[tuple]]:
    """session_records' rows made for the id `old` as session_records(new, ...) makes them (sub-agents' ids derive
    from their parent's), dated now: a prepare worker makes them before the write knows the session's id."""
    ids = {None: None, old: new}
    for row in sessions:  # parents come before their sub-agents
        if row["parent_id"] is not None:
            ids[row["id"]] = hashlib.sha1(f"{ids[row['parent_id']]}\0{row['native_id']}".encode()).hexdigest()[:20]
        row["id"], row["parent_id"], row["updated_at"] = ids[row["id"]], ids[row["parent_id"]], utcnow()
    if new != old:
        messages[:] = [(ids[m[0]], *m[1:]) for m in messages]  # session_id first
    return sessions, iter(messages)


def _session_row(sid: str, session: Session, parent: str | None) -> dict:
    """The session's row, its messages gone through once (a huge session's are read back from its spill)."""
    tally, usage, turns, title = Tally(), {}, 0, ""
    models: dict[str, None] = {}  # session.acting_models()
    for m in session.messages:
        tally.add(m)
        for key, n in m.usage.items():  # session.usage()
            usage[key] = usage.get(key, 0) + n
        if m.role == "user":
            if is_request(m):
                title = title if turns else " ".join(m.text.split())[:TITLE_CHARS]
                turns += 1
        elif m.model and (model := acting_model(m)):
            models.setdefault(model, None)
    for m in (m for branch in session.abandoned for m in branch):
        if m.model and (model := acting_model(m)):
            models.setdefault(model, None)
    tool_calls = tally.calls
    sig = tally.signals()
    return dict(
        id=sid, agent=session.agent, native_id=session.session_id, parent_id=parent, spawned_by=session.spawned_by,
        source_path=session.source_path, project=session.project, cwd=session.cwd, git_branch=session.git_branch,
        agent_version=session.agent_version, model=session.model, models=MODELS_SEP.join(models) or None,
        actor=session.actor, started_at=session.started_at,
        ended_at=session.ended_at, day=_day(session.started_at or session.ended_at),
        messages=len(session.messages), turns=turns, tool_calls=tool_calls,
        errors=sig.errors, input_tokens=usage.get("input_tokens", 0), output_tokens=usage.get("output_tokens", 0),
        compactions=session.compactions, abandoned_branches=len(session.abandoned), outcome=sig.outcome,
        exploration=sig.exploration, signals_json=json.dumps(sig.as_dict()), secrets_scrubbed=0,
        title=title, updated_at=utcnow())


def _message_rows(sid: str, session: Session) -> Iterator[dict]:
    """A session's own message rows as dicts (bench/trace_data)."""
    return (dict(zip(MESSAGE_COLUMNS, m)) for m in _message_tuples(sid, session))


def _message_tuples(sid: str, session: Session) -> Iterator[tuple]:
    for branch, msgs in enumerate([session.messages, *session.abandoned]):
        for seq, m in enumerate(msgs):
            yield _message_row(sid, branch, seq, m)


def _message_row(sid: str, branch: int, seq: int, m: Message) -> tuple:
    """A message's row: the values of MESSAGE_COLUMNS."""
    parts = m.parts
    tools = ",".join([p.tool_name or "?" for p in parts if p.kind == "tool_call"])
    return (sid, branch, seq, m.role, m.text, "", _packed([_part(p) for p in parts]), tools,
            int(any([p.is_error for p in parts])), m.timestamp, m.model, int(m.compact_summary), int(m.meta), m.line)


def _part(p: Part) -> dict[str, Any]:
    """Compact JSON for a part: k kind, t text, n tool name, i tool input, c call id, e error."""
    out: dict[str, Any] = {"k": p.kind}
    for key, value in (("t", p.text), ("n", p.tool_name), ("i", p.tool_input), ("c", p.call_id), ("e", p.is_error)):
        if value not in (None, "", False):
            out[key] = value
    return out


LZ4 = b"L"  # parts_z's first byte before an LZ4 block (its size stored in it); zlib's streams start with 0x78


def pack_parts(parts: list[dict[str, Any]] | str) -> dict[str, Any]:
    """The message row's columns for its parts (compact dicts, or their JSON text as an older payload carries it):
    `parts_z` the JSON as an LZ4 block behind `LZ4`, `parts_json` emptied."""
    return {"parts_json": "", "parts_z": _packed(parts)}


def _packed(parts: list[dict[str, Any]] | str) -> bytes:
    data = parts.encode() if isinstance(parts, str) else _dumps(parts)
    return LZ4 + lz4.block.compress(data, store_size=True)


def unpack(packed: bytes) -> bytes:
    """A `parts_z` value's JSON bytes: an LZ4 block behind `LZ4`, else zlib (0014 and the rows written before LZ4)."""
    if packed[:1] == LZ4:
        return lz4.block.decompress(memoryview(packed)[1:])
    return zlib.decompress(packed)


def _dumps(value: Any) -> bytes:
    """orjson (several times faster); the standard encoder for what orjson refuses (integers over 64 bits, a lone
    surrogate): ASCII, so any str encodes."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value).encode()


def _raw(row: Any) -> bytes | str:
    """A message row's parts JSON, either form: `parts_z` decompressed, or the `parts_json` of a row from before 0014
    (any object with both attributes, or a mapping with both keys: an ORM row, a Row, a dict)."""
    if isinstance(row, Mapping):
        packed, plain = row.get("parts_z"), row.get("parts_json")
    else:
        packed, plain = row.parts_z, row.parts_json
    if packed is not None:
        return unpack(packed)
    return plain or "[]"


def parts_text(row: Any) -> str:
    """A message row's parts as the JSON text (what the team wire carries)."""
    raw = _raw(row)
    return raw.decode() if isinstance(raw, bytes) else raw


def parts_of(row: Any) -> list[Part]:
    """A message row's Parts (for the transcript viewer and dataset building), from either form (`_raw`)."""
    # the standard decoder: orjson's turns an integer over 64 bits into a float
    return [Part(d.get("k", "text"), d.get("t", ""), d.get("n"), d.get("i"), d.get("c"), bool(d.get("e")))
            for d in json.loads(_raw(row))]


def _day(stamp: str | None) -> str | None:
    """YYYY-MM-DD in UTC from an ISO stamp (Z or offset); None when unreadable."""
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp[:10] if len(stamp) >= 10 and stamp[4] == "-" else None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.date().isoformat()

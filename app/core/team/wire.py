"""How a stored session travels: a member's session tree as a JSON payload (key + content sha256), and its write.

A message's parts travel as their JSON text in `parts_json` (`capture/rows.parts_text`), as before migration 0014
compressed them in the store: the payload is gzip'ed whole anyway, a payload's sha stays that of its content (so an
upgrade ships nothing again), and members and servers of either version read each other's payloads. Each side
compresses or expands at its store (`rows.pack_parts` / `rows.parts_text`). Who acted (`actor`, `models`: 0017)
travels with the student's own work only, for the same reason: a teacher session's payload is the one before."""
from __future__ import annotations

import gzip
import hashlib
import json
from typing import Any

from sqlalchemy import delete, insert, select

from app.core.base.schema import AgentSession, MessageRow, utcnow
from app.core.base.store import Store
from app.core.capture.actors import TEACHER
from app.core.capture.rows import pack_parts, parts_text

SKIP_SESSION = {"updated_at", "member"}
ACTED = {"models", "actor"}  # migration 0017: sent with the student's own work only, so a teacher session's sha stays
SKIP_MESSAGE = {"id", "parts_z"}  # the parts travel as their JSON text in parts_json


def payload(store: Store, key: str) -> dict[str, Any] | None:
    """The top-level session `key` and its sub-agents with their messages; None when it is no longer stored."""
    with store.engine.connect() as conn:
        rows = conn.execute(select(AgentSession.__table__).where(
            (AgentSession.id == key) | (AgentSession.parent_id == key)).order_by(AgentSession.id)).mappings().all()
        if not any(r["id"] == key for r in rows):
            return None
        ids = [r["id"] for r in rows]
        msgs = conn.execute(select(MessageRow.__table__).where(MessageRow.session_id.in_(ids)).order_by(
            MessageRow.session_id, MessageRow.branch, MessageRow.seq)).mappings().all()
    sessions = [{k: v for k, v in r.items() if k not in SKIP_SESSION and (k not in ACTED or r["actor"] != TEACHER)}
                for r in rows]
    messages = [{**{k: v for k, v in m.items() if k not in SKIP_MESSAGE}, "parts_json": parts_text(m)} for m in msgs]
    body = {"sessions": sessions, "messages": messages}
    return {"key": key, "sha256": content_sha(body), **body}


def content_sha(body: dict[str, Any]) -> str:
    data = json.dumps({"sessions": body["sessions"], "messages": body["messages"]}, sort_keys=True,
                      ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode()).hexdigest()


def roots(store: Store) -> list[str]:
    """Every top-level session stored here (the units that travel)."""
    with store.engine.connect() as conn:
        return [r[0] for r in conn.execute(select(AgentSession.id).where(AgentSession.parent_id.is_(None)))]


def encode(payloads: list[dict[str, Any]]) -> bytes:
    return gzip.compress(json.dumps(payloads, ensure_ascii=False, default=str).encode())


def decode(data: bytes) -> list[dict[str, Any]]:
    value = json.loads(gzip.decompress(data))
    if not isinstance(value, list) or not all(isinstance(p, dict) for p in value):
        raise ValueError("a payload list was expected")
    return value


def server_id(member: str, sid: str) -> str:
    """A member's session id on the server (two members' ids never meet)."""
    return hashlib.sha1(f"{member}\0{sid}".encode()).hexdigest()[:20]


def store_payload(store: Store, member: str, data: dict[str, Any]) -> int:
    """Write one payload in one transaction, replacing an earlier copy of (member, key); returns sessions written.
    A payload whose content sha does not match is refused (ValueError)."""
    key, sessions, messages = data["key"], list(data.get("sessions", [])), list(data.get("messages", []))
    if content_sha({"sessions": sessions, "messages": messages}) != data.get("sha256"):
        raise ValueError(f"session {key}: its content does not match its sha256")
    known = {s["id"] for s in sessions}
    if key not in known:
        raise ValueError(f"session {key}: the payload lacks its top-level row")
    if any(m["session_id"] not in known for m in messages):
        raise ValueError(f"session {key}: a message names a session outside the payload")
    if any(not isinstance(m.get("parts_json") or "", str) for m in messages):
        raise ValueError(f"session {key}: a message's parts_json is not JSON text")
    columns = set(AgentSession.__table__.columns.keys()) - SKIP_SESSION
    msg_columns = set(MessageRow.__table__.columns.keys()) - SKIP_MESSAGE
    root, now = server_id(member, key), utcnow()
    new_sessions = [{**{k: v for k, v in s.items() if k in columns}, "id": server_id(member, s["id"]),
                     "parent_id": server_id(member, s["parent_id"]) if s.get("parent_id") else None,
                     "member": member, "updated_at": now} for s in sessions]
    new_messages = [{**{k: v for k, v in m.items() if k in msg_columns}, **pack_parts(m.get("parts_json") or "[]"),
                     "session_id": server_id(member, m["session_id"])} for m in messages]
    with store.engine.begin() as conn:
        old = [r[0] for r in conn.execute(select(AgentSession.id).where(
            (AgentSession.id == root) | (AgentSession.parent_id == root)))]
        if old:
            conn.execute(delete(MessageRow).where(MessageRow.session_id.in_(old)))
            conn.execute(delete(AgentSession).where(AgentSession.id.in_(old)))
        conn.execute(insert(AgentSession), new_sessions)
        if new_messages:
            conn.execute(insert(MessageRow), new_messages)
    return len(new_sessions)


def withdraw(store: Store, member: str) -> tuple[int, list[str]]:
    """Delete every session this member shipped: how many, and the datasets already built with them (they keep their
    examples and say so; no later build can use the sessions)."""
    from app.core.datasets.catalog import Registry

    with store.engine.begin() as conn:
        ids = [r[0] for r in conn.execute(select(AgentSession.id).where(AgentSession.member == member))]
        if ids:
            conn.execute(delete(MessageRow).where(MessageRow.session_id.in_(ids)))
            conn.execute(delete(AgentSession).where(AgentSession.id.in_(ids)))
    return len(ids), Registry(store).built_with(ids)

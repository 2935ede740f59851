"""The wire with the parts stored compressed (migration 0014): a payload carries the parts as their JSON text, the
server stores them compressed, a payload from a store of the old form (an older member) is the same payload with the
same sha (an upgrade ships nothing again), and the server takes it."""
from __future__ import annotations

from sqlalchemy import select, update

from app.core.base.schema import MessageRow
from app.core.base.store import Store
from app.core.capture.rows import parts_of, parts_text
from app.core.team import wire
from tests.core.datasets.helpers import ingest, write_session


def _parts(store: Store) -> list:
    with store.session() as s:
        return [(r.session_id, r.branch, r.seq, parts_of(r), r.parts_json, r.parts_z is None)
                for r in s.scalars(select(MessageRow).order_by(MessageRow.session_id, MessageRow.branch,
                                                               MessageRow.seq))]


def test_a_payload_carries_the_parts_as_text_and_the_server_stores_them_compressed(tmp_path):
    write_session(tmp_path / "t", 0, extra_user=" — ünïcode \x1c\x1d\x1e")
    write_session(tmp_path / "t", 1)
    member, server = Store(tmp_path / "member.db"), Store(tmp_path / "server.db")
    ingest(member, tmp_path / "t")
    keys = sorted(wire.roots(member))
    sent = [wire.payload(member, key) for key in keys]
    for one in sent:
        assert one["messages"] and all("parts_z" not in m and m["parts_json"].startswith("[") for m in one["messages"])
    with member.session() as s:
        texts = [parts_text(r) for r in s.scalars(select(MessageRow).order_by(MessageRow.session_id,
                                                                                MessageRow.branch, MessageRow.seq))]
    assert [m["parts_json"] for one in sent for m in one["messages"]] == texts
    assert any("ünïcode \\u001c\\u001d\\u001e" in t for t in texts)  # JSON escapes the separators

    for one in wire.decode(wire.encode(sent)):
        assert wire.store_payload(server, "alice", one) == 1
    mine, theirs = _parts(member), _parts(server)
    assert all(p[4] == "" and not p[5] for p in mine)  # capture wrote them compressed
    assert sorted((wire.server_id("alice", sid), *rest[:3]) for sid, *rest in mine) == \
        sorted(p[:4] for p in theirs) and all(p[4] == "" and not p[5] for p in theirs)
    assert sum(len(p.text) for row in mine for p in row[3]) > 0

    # the same sessions stored the old way (parts_json, no parts_z): the same payload, the same sha
    with member.engine.begin() as conn:
        for rid, text in zip([r[0] for r in conn.execute(select(MessageRow.id).order_by(
                MessageRow.session_id, MessageRow.branch, MessageRow.seq))], texts):
            conn.execute(update(MessageRow).where(MessageRow.id == rid).values(parts_json=text, parts_z=None))
    old = [wire.payload(member, key) for key in keys]
    assert old == sent and [o["sha256"] for o in old] == [s["sha256"] for s in sent]
    for one in old:  # an older member's upload replaces the copy stored: still compressed, the same parts
        assert wire.store_payload(server, "alice", one) == 1
    assert _parts(server) == theirs
    member.close()
    server.close()


def test_the_students_own_work_travels_as_such_and_a_teacher_sessions_sha_stays(tmp_path):
    """Migration 0017's `models` and `actor` travel with the student's own work only: the server stores it as the
    student's (never a teacher example there either), a teacher session's payload is the one before 0017."""
    from sqlalchemy import update as set_

    from app.core.base.schema import AgentSession

    write_session(tmp_path / "t", 0)
    write_session(tmp_path / "t", 1)
    member, server = Store(tmp_path / "member.db"), Store(tmp_path / "server.db")
    ingest(member, tmp_path / "t")
    teacher, student = sorted(wire.roots(member))
    with member.session() as s:
        s.execute(set_(AgentSession).where(AgentSession.id == student).values(actor="student", models="nightschool"))
    sent = {key: wire.payload(member, key) for key in (teacher, student)}
    assert not ({"actor", "models"} & sent[teacher]["sessions"][0].keys())
    assert sent[student]["sessions"][0]["actor"] == "student"
    for one in sent.values():
        wire.store_payload(server, "alice", one)
    with server.session() as s:
        got = {r.id: (r.actor, r.models) for r in s.scalars(select(AgentSession))}
    assert got == {wire.server_id("alice", teacher): ("teacher", None),
                   wire.server_id("alice", student): ("student", "nightschool")}
    member.close()
    server.close()

"""The server's invitations: a token shown once and stored as its sha256, revoked by name, members listed."""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select, update

from app.core.base.errors import Explained
from app.core.base.schema import TeamMember, utcnow
from app.core.base.store import Store


class MemberError(Explained, ValueError):
    """An invitation cannot be made or revoked."""


@dataclass
class Member:
    name: str
    created_at: datetime | None
    revoked_at: datetime | None = None

    def as_dict(self) -> dict:
        return {"name": self.name, "created_at": _iso(self.created_at), "revoked_at": _iso(self.revoked_at)}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def invite(store: Store, name: str) -> str:
    """A new member's token (shown once: only its sha256 is kept)."""
    name = (name or "").strip()
    if not name or len(name) > 80:
        raise MemberError("a member needs a name of 1 to 80 characters", fix="pass a short name, e.g. alice")
    token = secrets.token_urlsafe(32)
    with store.engine.begin() as conn:
        held = conn.execute(select(TeamMember.id, TeamMember.revoked_at).where(TeamMember.name == name)).first()
        if held is not None and held.revoked_at is None:
            raise MemberError(f"{name} is already a member", why="a live member has one token",
                              fix=f"revoke {name} first (nightschool team revoke {name}) or pick another name")
        if held is not None:  # a revoked member invited again: a new token, the same name (its sessions stay its)
            conn.execute(update(TeamMember).where(TeamMember.id == held.id).values(
                token_sha256=token_hash(token), revoked_at=None, created_at=utcnow()))
        else:
            conn.execute(insert(TeamMember).values(name=name, token_sha256=token_hash(token), created_at=utcnow()))
    return token


def revoke(store: Store, name: str) -> None:
    """The member's token is refused from now on; its sessions stay until withdrawn. Inviting the name again gives
    it a new token."""
    with store.engine.begin() as conn:
        row = conn.execute(select(TeamMember).where(TeamMember.name == name)).first()
        if row is None:
            raise MemberError(f"{name} is not a member", fix="see the members with: nightschool team members")
        if row.revoked_at is None:
            conn.execute(update(TeamMember).where(TeamMember.id == row.id).values(revoked_at=utcnow()))


def member_of(store: Store, token: str) -> Member | None:
    """The live member this token belongs to; None for an unknown or revoked token."""
    if not token:
        return None
    with store.engine.connect() as conn:
        row = conn.execute(select(TeamMember).where(TeamMember.token_sha256 == token_hash(token))).first()
    if row is None or row.revoked_at is not None:
        return None
    return Member(row.name, row.created_at, row.revoked_at)


def list_members(store: Store) -> list[Member]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(TeamMember).order_by(TeamMember.name)).all()
    return [Member(r.name, r.created_at, r.revoked_at) for r in rows]

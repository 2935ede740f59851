"""The team server: members POST gzip session payloads with their bearer token; the team school's status (members
only); a member withdraws its own. The school itself runs beside it in the data dir's runtime (`nightschool team
serve`, app/cli/team.py): the team sits below the runtime, so the school's status is handed in."""
from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from sqlalchemy import func, select

from app.core.base.schema import AgentSession
from app.core.base.store import Store
from app.core.team import members, wire

MAX_BODY = 256 * 1024 * 1024  # one outbox file is far smaller: a bound on what one request may hold


def create_app(store: Store, school_status: Callable[[], dict[str, Any]]) -> FastAPI:
    """school_status: the school's status as `School.status()` gives it (the caller owns the runtime)."""
    app = FastAPI(title="nightschool team", docs_url=None, redoc_url=None, openapi_url=None)

    def member(request: Request) -> members.Member:
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        found = members.member_of(store, token)
        if found is None:
            raise HTTPException(401, detail="unknown or revoked token: ask the team's server for an invitation",
                                headers={"WWW-Authenticate": "Bearer"})
        return found

    @app.post("/v1/sessions")
    async def post_sessions(request: Request, who: members.Member = Depends(member)) -> dict[str, Any]:  # noqa: B008
        body = await request.body()
        if len(body) > MAX_BODY:
            raise HTTPException(413, detail="the body is too large: push fewer sessions at a time")
        try:
            payloads = wire.decode(body)
        except (OSError, EOFError, zlib.error, ValueError) as exc:
            raise HTTPException(400, detail=f"the body is not a gzip JSON payload list: {exc}") from None
        stored = 0
        try:
            for one in payloads:
                stored += wire.store_payload(store, who.name, one)
        except (KeyError, TypeError, ValueError) as exc:
            raise HTTPException(400, detail=f"a payload was refused: {exc}") from None
        return {"member": who.name, "payloads": len(payloads), "sessions": stored}

    @app.get("/v1/status")
    def status(who: members.Member = Depends(member)) -> dict[str, Any]:  # noqa: B008 - members only
        return status_of(store, school_status())

    @app.delete("/v1/me/sessions")
    def withdraw(who: members.Member = Depends(member)) -> dict[str, Any]:  # noqa: B008
        count, datasets = wire.withdraw(store, who.name)
        return {"member": who.name, "withdrawn": count, "datasets_built_with_them": datasets}

    return app


def status_of(store: Store, school: dict[str, Any]) -> dict[str, Any]:
    """What a member sees of the team school: its status, the deployed student (model, checkpoint, since when, the
    verdict that let it), the last cycle's verdict, and how many sessions each member shipped."""
    from app.core.judge.deployment import summary

    with store.engine.connect() as conn:
        counts = {name or "": n for name, n in conn.execute(
            select(AgentSession.member, func.count()).where(AgentSession.parent_id.is_(None)).group_by(
                AgentSession.member))}
    base_model = ((school.get("policy") or {}).get("base_model")) or "default"
    return {"school": school, "sessions_per_member": counts, "members": len(members.list_members(store)),
            "deployed": summary(store, base_model), "last_verdict": last_verdict(school.get("last"))}


def last_verdict(cycle: dict[str, Any] | None) -> dict[str, Any] | None:
    """The last ended cycle's verdict from its report card (None: no cycle ended yet)."""
    if not cycle:
        return None
    report = cycle.get("report") or {}
    return {"cycle": cycle.get("id"), "state": cycle.get("state"), "verdict": report.get("verdict"),
            "reasons": report.get("reasons") or ([cycle["reason"]] if cycle.get("reason") else []),
            "ended_at": cycle.get("ended_at")}


def serve(store: Store, school_status: Callable[[], dict[str, Any]], host: str = "127.0.0.1",
          port: int = 8790) -> int:
    """Run the HTTP API in the foreground until SIGINT / SIGTERM (loopback unless told otherwise)."""
    import uvicorn

    uvicorn.Server(uvicorn.Config(create_app(store, school_status), host=host, port=port,
                                  log_level="warning")).run()
    return 0

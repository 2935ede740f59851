"""The team server: members POST gzip session payloads with their bearer token; status; a member withdraws its own."""
from __future__ import annotations

import zlib
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from sqlalchemy import func, select

from app.core.base.schema import AgentSession
from app.core.base.store import Store
from app.core.team import members, wire

MAX_BODY = 256 * 1024 * 1024  # one outbox file is far smaller: a bound on what one request may hold


def create_app(store: Store) -> FastAPI:
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
    def status() -> dict[str, Any]:
        from app.core.runtime.school.facade import School

        with store.engine.connect() as conn:
            counts = {name or "": n for name, n in conn.execute(
                select(AgentSession.member, func.count()).where(AgentSession.parent_id.is_(None)).group_by(
                    AgentSession.member))}
        return {"school": School(store).status(), "sessions_per_member": counts,
                "members": len(members.list_members(store))}

    @app.delete("/v1/me/sessions")
    def withdraw(who: members.Member = Depends(member)) -> dict[str, Any]:  # noqa: B008
        count, datasets = wire.withdraw(store, who.name)
        return {"member": who.name, "withdrawn": count, "datasets_built_with_them": datasets}

    return app


def serve(host: str = "127.0.0.1", port: int = 8790, store: Store | None = None) -> int:
    """Run the server in the foreground until stopped (loopback unless told otherwise)."""
    import uvicorn

    store = store or Store()
    try:
        uvicorn.Server(uvicorn.Config(create_app(store), host=host, port=port, log_level="warning")).run()
    finally:
        store.close()
    return 0

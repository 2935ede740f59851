"""The built-in model server (`python -m engine.serve.modelserver --state-dir D --model GGUF --name N --sha256 H …`):
llama-cpp-python's OpenAI-compatible server on loopback behind an API key, plus `/health` (public), and behind the
key `/nightschool/status`, `/nightschool/switch` (the new model is loaded and answers once while the old one keeps
serving; any failure leaves the old one), `/nightschool/rollback` (instant: the previous model stays loaded),
`/nightschool/park` (the models leave memory for a training job; the OpenAI routes answer 503 with Retry-After until
`/nightschool/unpark` loads them again) and `/nightschool/shutdown`. Its state (pid, url, models) is
`<state-dir>/server.json`, rewritten on every change. With `--db` the answers are recorded into the experience buffer
while the user has it on (engine/serve/recorder.py; each answer carries `X-Nightschool-Experience: <id>`), and clients
rate them with `/nightschool/feedback` (and read one back with `/nightschool/experience/<id>`). Chat completions
speak OpenAI tools (engine/serve/openai_tools.py), `/v1/responses` answers the Responses API through them
(engine/serve/responses.py); `/v1/models` lists the student as `nightschool`, whatever file serves."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Literal

import llama_cpp.server.app as server_app
from fastapi import Depends, HTTPException
from fastapi.responses import JSONResponse
from llama_cpp.server.model import LlamaProxy
from llama_cpp.server.settings import ModelSettings, ServerSettings
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from app.core.base.files import atomic_write
from app.core.base.fingerprint import sha256_file
from app.core.judge import decoding
from engine.render import supports_tools
from engine.serve import openai_tools, responses
from engine.serve.recorder import Recorder, RecordingMiddleware, Refused

STATE = "server.json"
PARKED_RETRY_S = 600  # Retry-After while parked: a training stage takes minutes


def decoding_defaults() -> None:
    """A request that names no repetition penalty gets the one the judge decodes with (app/core/judge/decoding.py),
    over the same last generated tokens: the gate measures what clients see. A request with `tools` decodes under
    their tool-call grammar as the judge does (`tool_grammar.with_tool_grammar`)."""
    from llama_cpp.server import types

    for request in (types.CreateChatCompletionRequest, types.CreateCompletionRequest):
        request.model_fields["repeat_penalty"].default = decoding.REPEAT_PENALTY
        request.model_rebuild(force=True)


def closes_tool_call(llama):
    """A stopping criterion: true at the token that completes a closing </tool_call> tag (the tag stays in the answer:
    a stopping criterion, unlike a stop string, keeps its text), as the judge ends answers."""
    tag = decoding.TOOL_END.encode()

    def closed(tokens, logits) -> bool:
        tail = [int(t) for t in tokens[-8:]]
        return tag in llama.detokenize(tail) and tag not in llama.detokenize(tail[:-1])

    return closed


def stop_at_tool_end(llama) -> None:
    """The chat handler of the GGUF's embedded template also stops at the end of the first tool call (what a model
    writes after its call is never run; the judge cuts it the same way), decodes tool calls under the request's
    tool grammar, and speaks OpenAI tools (engine/serve/openai_tools: tools and tool history rendered as in
    training, the student's calls returned as `tool_calls`)."""
    from llama_cpp.llama import StoppingCriteriaList
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from engine.workers import tool_grammar

    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        return
    model, eos, bos = llama._model, llama.token_eos(), llama.token_bos()
    closed = closes_tool_call(llama)

    class Formatter(Jinja2ChatFormatter):
        def __call__(self, **kwargs):
            result = super().__call__(**kwargs)
            result.stopping_criteria = StoppingCriteriaList([*(result.stopping_criteria or []), closed])
            return result

    handler = Formatter(template, eos_token=model.token_get_text(eos) if eos >= 0 else "",
                        bos_token=model.token_get_text(bos) if bos >= 0 else "", stop_token_ids=[eos]).to_chat_handler()
    llama.chat_handler = openai_tools.speaking_tools(tool_grammar.with_tool_grammar(handler), supports_tools(template))
    tool_grammar.install(llama)  # the request's grammar applies once a call is opened, as the judge decodes


class Served(BaseModel):
    """A model the server holds: its alias, file, hash, quantization and load facts."""

    name: str
    path: str
    sha256: str
    quant: str = ""
    load_s: float = 0.0
    loaded_at: float = 0.0


class Slot:
    def __init__(self, info: Served, llama) -> None:
        self.info, self.llama = info, llama


def load_slot(info: Served, n_ctx: int) -> Slot:
    """Load and check a model before it may serve: the file's hash, llama.cpp loading it, one generated token."""
    path = Path(info.path)
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    if info.sha256 and sha256_file(path) != info.sha256:
        raise ValueError(f"{path.name} changed since it was exported (sha256 differs): corrupt or truncated")
    started = time.perf_counter()
    llama = LlamaProxy.load_llama_from_model_settings(
        ModelSettings(model=str(path), model_alias=info.name, n_ctx=n_ctx, verbose=False,
                      last_n_tokens_size=decoding.PENALTY_LAST_N))
    try:
        stop_at_tool_end(llama)
        llama.create_completion("Hello", max_tokens=1, temperature=0.0)
    except Exception:
        llama.close()
        raise
    info = info.model_copy(update={"load_s": round(time.perf_counter() - started, 3), "loaded_at": time.time()})
    return Slot(info, llama)


class Slots(LlamaProxy):
    """llama-cpp-python's model proxy with two slots: the serving model and the previous one, kept loaded."""

    current: Slot
    standby: Slot | None = None
    parked: list[Served] | None = None  # while parked: what to load again (current, then standby)

    def __init__(self, models: list[ModelSettings]) -> None:  # set up by main() before serving
        self._model_settings_dict = {}
        self.standby = None
        self.parked = None

    def __call__(self, model: str | None = None):
        return self.current.llama

    def __iter__(self):
        yield self.current.info.name

    def push(self, slot: Slot) -> None:
        if self.standby is not None:
            self.standby.llama.close()
        self.standby, self.current = self.current, slot

    def swap(self) -> None:
        self.current, self.standby = self.standby, self.current

    def free(self) -> None:
        for slot in (self.current, self.standby):
            if slot is not None and slot.llama is not None:
                slot.llama.close()

    def park(self) -> None:
        """Free both models' memory; the slots keep what they were."""
        if self.parked is None:
            self.parked = [s.info for s in (self.current, self.standby) if s is not None]
            self.free()
            for slot in (self.current, self.standby):
                if slot is not None:
                    slot.llama = None

    def unpark(self, n_ctx: int) -> None:
        if self.parked is None:
            return
        infos, self.parked = self.parked, None
        slots = [load_slot(info, n_ctx) for info in infos]
        self.current, self.standby = slots[0], (slots[1] if len(slots) > 1 else None)


class Feedback(BaseModel):
    """A client's word on a recorded answer (POST /nightschool/feedback)."""

    model_config = ConfigDict(extra="forbid")
    experience: str = Field(min_length=1, max_length=40, description="the answer's X-Nightschool-Experience header")
    rating: Literal["up", "down"]
    correction: str | dict | None = Field(None, description="the better answer: text or an assistant message")
    note: str = Field("", max_length=2000)


class Switch(BaseModel):
    name: str
    path: str
    sha256: str = ""
    quant: str = ""


def _proxy() -> Slots:
    return server_app._llama_proxy  # type: ignore[return-value]


def _served() -> tuple[str, str]:
    """(name, sha256) of the model serving now."""
    info = _proxy().current.info
    return info.name, info.sha256


async def _refusable(call, *args) -> dict:
    """Run a recorder call off the event loop; a refusal becomes its HTTP status with what was wrong."""
    try:
        return await run_in_threadpool(call, *args)
    except Refused as exc:
        raise HTTPException(status_code=exc.status, detail=str(exc)) from exc


@contextlib.asynccontextmanager
async def _locked():
    """Hold llama-cpp-python's request locks (no completion runs while the models change places)."""
    async with contextlib.asynccontextmanager(server_app.get_llama_proxy)() as proxy:
        yield proxy


class Server:
    """The app, its state file and the uvicorn server that runs it."""

    def __init__(self, args) -> None:
        self.args, self.state_dir, self.started = args, Path(args.state_dir), time.time()
        key = (self.state_dir / "api_key").read_text(encoding="utf-8").strip()
        server_app.LlamaProxy = Slots  # create_app builds our two-slot proxy instead of loading by alias
        self.app = server_app.create_app(server_settings=ServerSettings(host=args.host, port=args.port, api_key=key),
                                         model_settings=[ModelSettings(model=args.model, model_alias=args.name)])
        self.uvicorn = None
        self.recorder = Recorder(args.db or None, api_key=key, served=_served)
        self._routes()
        self.app.add_middleware(RecordingMiddleware, recorder=self.recorder)  # outermost: sees the final answer

    def status(self) -> dict:
        proxy = _proxy()
        return {"pid": os.getpid(), "url": f"http://{self.args.host}:{self.port}/v1", "host": self.args.host,
                "port": self.port, "started_at": self.started, "current": proxy.current.info.model_dump(),
                "standby": proxy.standby.info.model_dump() if proxy.standby else None,
                "parked": proxy.parked is not None}

    def write_state(self) -> None:
        atomic_write(self.state_dir / STATE, json.dumps(self.status(), indent=1))

    def _routes(self) -> None:
        """The server's own routes (the OpenAI-compatible /v1 ones are llama-cpp-python's), all but /health behind
        the API key, in this order: status, the recorder's, the model slots', parking, shutdown."""
        app, auth = self.app, [Depends(server_app.authenticate)]
        self._status_routes(app, auth)
        self._experience_routes(app, auth)
        self._slot_routes(app, auth)
        self._park_routes(app, auth)

        @app.post("/nightschool/shutdown", dependencies=auth)
        async def shutdown() -> dict:
            self.uvicorn.should_exit = True
            return {"status": "stopping"}

    def _status_routes(self, app, auth: list) -> None:
        @app.get("/health")
        async def health() -> dict:
            return {"status": "ok", "model": _proxy().current.info.name}

        app.get("/v1/models", dependencies=auth)(lambda: openai_tools.models(_proxy().current.info))
        app.router.routes.insert(0, app.router.routes.pop())  # before llama-cpp-python's own /v1/models
        responses.route(app, auth)  # the Responses API (Codex), answered by the chat handler

        @app.get("/nightschool/status", dependencies=auth)
        async def status() -> dict:
            await run_in_threadpool(self.recorder.try_refresh)  # a setting just changed is in effect from here on
            return {**self.status(), "recording": self.recorder.stats()}

    def _experience_routes(self, app, auth: list) -> None:
        """What the recorder kept: a rating or correction for an answer, and one answer's entry."""

        @app.post("/nightschool/feedback", dependencies=auth)
        async def feedback(req: Feedback) -> dict:
            return await _refusable(self.recorder.feedback, req.experience, req.rating, req.correction, req.note)

        @app.get("/nightschool/experience/{exp_id}", dependencies=auth)
        async def experience(exp_id: str) -> dict:
            return await _refusable(self.recorder.entry, exp_id)

    def _slot_routes(self, app, auth: list) -> None:
        """The served model's slots: switch to a new model (the old one kept as standby), roll back."""

        @app.post("/nightschool/switch", dependencies=auth)
        async def switch(req: Switch) -> dict:
            info = Served(name=req.name, path=req.path, sha256=req.sha256, quant=req.quant)
            try:
                slot = await run_in_threadpool(load_slot, info, self.args.n_ctx)
            except Exception as exc:  # the old model keeps serving
                raise HTTPException(status_code=422, detail=f"{Path(req.path).name} was refused: {exc}") from exc
            async with _locked() as proxy:
                proxy.push(slot)
                self.write_state()
            return self.status()

        @app.post("/nightschool/rollback", dependencies=auth)
        async def rollback() -> dict:
            async with _locked() as proxy:
                if proxy.standby is None:
                    raise HTTPException(status_code=409, detail="no previous model is loaded")
                proxy.swap()
                self.write_state()
            return self.status()

    def _park_routes(self, app, auth: list) -> None:
        """Park the model while the night school trains (the /v1 routes answer 503 meanwhile), and unpark it."""

        @app.middleware("http")
        async def parked_answers_503(request, call_next):
            if _proxy().parked is not None and request.url.path.startswith("/v1/"):
                return JSONResponse({"error": {"message": "the model is parked while the night school trains",
                                               "type": "parked"}}, status_code=503,
                                    headers={"Retry-After": str(PARKED_RETRY_S)})
            return await call_next(request)

        @app.post("/nightschool/park", dependencies=auth)
        async def park() -> dict:
            async with _locked() as proxy:
                proxy.park()
                self.write_state()
            return self.status()

        @app.post("/nightschool/unpark", dependencies=auth)
        async def unpark() -> dict:
            async with _locked() as proxy:
                try:
                    await run_in_threadpool(proxy.unpark, self.args.n_ctx)
                except Exception as exc:
                    raise HTTPException(status_code=422, detail=f"the parked model could not be loaded: {exc}") from exc
                self.write_state()
            return self.status()

    def run(self) -> int:
        import uvicorn

        proxy = _proxy()
        proxy.current = load_slot(Served(name=self.args.name, path=self.args.model, sha256=self.args.sha256,
                                         quant=self.args.quant), self.args.n_ctx)
        if self.args.standby:
            proxy.standby = load_slot(Served(name=self.args.standby_name, path=self.args.standby,
                                             sha256=self.args.standby_sha256, quant=self.args.standby_quant),
                                      self.args.n_ctx)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.args.host, self.args.port))
        self.port = sock.getsockname()[1]
        self.recorder.start()
        self.write_state()
        self.uvicorn = uvicorn.Server(uvicorn.Config(self.app, log_level="warning"))
        try:
            self.uvicorn.run(sockets=[sock])
        finally:
            self.recorder.stop()
            proxy.free()
            (self.state_dir / STATE).unlink(missing_ok=True)
        return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m engine.serve.modelserver", description="Serve a GGUF (OpenAI-compatible).")
    p.add_argument("--state-dir", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--grammar", choices=("on", "off"), default="on" if decoding.GRAMMAR else "off",
                   help="decode a request with tools under their tool-call grammar (as the judge does)")
    p.add_argument("--db", help="the Nightschool store: answers are recorded there while the experience buffer is on")
    p.add_argument("--model", required=True, help="the GGUF to serve")
    p.add_argument("--standby", help="a GGUF to keep loaded for an instant rollback")
    for slot in ("", "standby-"):
        p.add_argument(f"--{slot}name", default="nightschool")
        p.add_argument(f"--{slot}sha256", default="", help="refuse the file unless it has this sha256")
        p.add_argument(f"--{slot}quant", default="")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from engine.workers import tool_grammar

    args = parse(argv)
    decoding_defaults()
    openai_tools.accept_wire_messages()
    tool_grammar.SERVED["on"] = args.grammar == "on"
    try:
        return Server(args).run()
    except OSError as exc:
        print(f"nightschool serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
    except ValueError as exc:
        print(f"nightschool serve: the model cannot be served: {exc}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

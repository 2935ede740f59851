"""The experience recorder of the built-in server: an ASGI middleware that copies each OpenAI answer off the request
path, and a writer thread that scrubs it and stores it in the experience buffer (when the user turned it on). A
Responses API answer is kept as the chat exchange it was answered as (engine/serve/responses.py)."""
from __future__ import annotations

import json
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.core.base.errors import Explained
from app.core.base.schema import ExperienceRow
from app.core.base.store import Store
from app.core.experience import buffer, config
from app.core.experience.buffer import ExperienceError, Recorded
from app.core.scrub.scrubber import Scrubber
from engine.serve import responses

ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completion", responses.ROUTE: "responses"}
HEADER = b"x-nightschool-experience"
CLIENT_HEADER = b"x-nightschool-client"
QUEUE_SIZE = 256  # answers waiting for the writer; a full queue drops the newest (counted)
SETTING_TTL_S = 2.0  # the buffer setting is re-read at most this often
PRUNE_EVERY = 200  # entries written between two retention passes
KEY_PLACEHOLDER = "<SECRET:server_api_key>"
_STOP = object()


@dataclass
class Exchange:
    """One answered request as the middleware saw it: raw bytes and a few header values, nothing parsed yet."""

    id: str
    route: str
    request: bytes
    response: bytes
    started: float  # epoch seconds
    latency_ms: float
    client_header: str = ""
    user_agent: str = ""
    model: str = ""
    model_sha256: str = ""


@dataclass
class Answer:
    """The assistant's message assembled from a JSON answer or from the deltas of an SSE stream."""

    message: dict
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Refused(Explained):
    """A feedback call or lookup the server refuses, changing nothing: its HTTP status and what was wrong."""

    def __init__(self, status: int, message: str, why: str = "", fix: str = "") -> None:
        super().__init__(message, why=why, fix=fix)
        self.status = status


def client_label(header: str, request: dict, user_agent: str) -> str:
    """X-Nightschool-Client, else the request's `user` field, else the User-Agent's product, else "unknown"."""
    if header.strip():
        return header.strip()
    if isinstance(request.get("user"), str) and request["user"].strip():
        return request["user"].strip()
    product = user_agent.strip().split(" ")[0].split("/")[0] if user_agent.strip() else ""
    return product or "unknown"


def parse_answer(route: str, body: bytes, stream: bool) -> Answer:
    """The answer of a JSON response, or assembled from an SSE stream's chunks."""
    if route == "responses":
        return Answer(*responses.answer_of(body, stream))
    if stream:
        return _assemble([json.loads(line[5:]) for line in body.decode("utf-8").splitlines()
                          if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]")], route)
    data = json.loads(body)
    choice = (data.get("choices") or [{}])[0]
    usage = data.get("usage") or {}
    if route == "completion":
        message = {"role": "assistant", "content": choice.get("text") or ""}
    else:
        raw = choice.get("message") or {}
        message = {"role": "assistant", **{k: raw[k] for k in ("content", "tool_calls") if raw.get(k) is not None}}
        message.setdefault("content", "")
    return Answer(message, choice.get("finish_reason") or "", int(usage.get("prompt_tokens") or 0),
                  int(usage.get("completion_tokens") or 0))


def _assemble(chunks: list[dict], route: str) -> Answer:
    text, calls, finish, usage, pieces = [], {}, "", {}, 0
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            part = choice.get("text") if route == "completion" else delta.get("content")
            if part:
                text.append(part)
            for call in delta.get("tool_calls") or []:
                _merge_call(calls.setdefault(call.get("index", len(calls)), {}), call)
            pieces += bool(part or delta.get("tool_calls"))
            finish = choice.get("finish_reason") or finish
    message = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    # llama.cpp streams one token per chunk: without a usage chunk, the chunks count the answer's tokens
    return Answer(message, finish, int(usage.get("prompt_tokens") or 0),
                  int(usage.get("completion_tokens") or pieces))


def _merge_call(into: dict, delta: dict) -> None:
    """One streamed tool-call delta into the call being assembled (the name once, the arguments in pieces)."""
    into.update({key: delta[key] for key in ("id", "type") if delta.get(key)})
    fn = delta.get("function") or {}
    target = into.setdefault("function", {"name": "", "arguments": ""})
    target["name"] = target["name"] or fn.get("name") or ""
    target["arguments"] += fn.get("arguments") or ""


def without_key(value: Any, key: str) -> Any:
    """The value with every occurrence of the server's API key replaced (a client may paste it into a message)."""
    if not key:
        return value
    return json.loads(json.dumps(value).replace(key, KEY_PLACEHOLDER))


def to_recorded(ex: Exchange, api_key: str = "") -> Recorded:
    """An exchange as a buffer entry: request and answer parsed, the API key removed, scrubbed like captured
    sessions (secrets become typed placeholders, the home path `~`); no header is kept but the client's label."""
    request = json.loads(ex.request)
    if not isinstance(request, dict):
        raise TypeError("the request body is not a JSON object")
    answer = parse_answer(ex.route, ex.response, bool(request.get("stream")))
    route, request = ("chat", responses.chat_request(request)) if ex.route == "responses" else (ex.route, request)
    label = client_label(ex.client_header, request, ex.user_agent)
    request, message, label = Scrubber().values([without_key(v, api_key) for v in (request, answer.message, label)])
    return Recorded(id=ex.id, request=request, answer=message, client=label, model=ex.model,
                    model_sha256=ex.model_sha256, route=route, finish_reason=answer.finish_reason,
                    latency_ms=round(ex.latency_ms, 2), prompt_tokens=answer.prompt_tokens,
                    completion_tokens=answer.completion_tokens,
                    created_at=datetime.fromtimestamp(ex.started, UTC))


@dataclass
class Counts:
    """What the recorder did since the server started."""

    recorded: int = 0
    discarded: int = 0  # answered while the buffer was off
    dropped: int = 0  # the writer's queue was full
    failed: int = 0  # could not be parsed or stored
    pruned: int = 0
    last_error: str = ""


@dataclass
class Recorder:
    """Hands answered requests to a writer thread through a bounded queue; the writer stores them when the buffer
    is on. `active` is the cached setting the middleware reads (no I/O on the request path)."""

    db: Path | str | None  # a SQLite file or a PostgreSQL URL (its password from NIGHTSCHOOL_DATABASE_URL)
    api_key: str = ""
    served: Callable[[], tuple[str, str]] = lambda: ("", "")  # (model name, sha256) serving now
    queue_size: int = QUEUE_SIZE
    counts: Counts = field(default_factory=Counts)

    def __post_init__(self) -> None:
        self.store: Store | None = None
        self.cfg = config.BufferConfig()
        self.read_at = 0.0
        self.queue: queue.Queue = queue.Queue(self.queue_size)
        self.pending: set[str] = set()
        self.changed = threading.Condition()
        self.reading = threading.Lock()
        self.thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.store is not None and self.cfg.enabled

    def open(self) -> None:
        """Open the store (migrated) and read the setting; a store that cannot be opened leaves recording off."""
        if self.db is None:
            return
        try:
            self.store = Store(self.db)
            self.refresh()
        except Exception as exc:  # noqa: BLE001 - serving goes on without recording
            self.store = None
            print(f"nightschool serve: answers are not recorded: {type(exc).__name__}: {exc}", file=sys.stderr)

    def start(self) -> None:
        self.open()
        if self.store is not None:
            self.thread = threading.Thread(target=self._run, name="experience-writer", daemon=True)
            self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Write what is queued, then end the writer."""
        if self.thread is not None:
            try:
                self.queue.put(_STOP, timeout=timeout)
            except queue.Full:
                pass
            self.thread.join(timeout)

    def refresh(self) -> config.BufferConfig:
        """Read the buffer setting now (one reader at a time: a read begun earlier never overwrites a later one)."""
        if self.store is not None:
            with self.reading:
                self.cfg, self.read_at = config.buffer(self.store), time.monotonic()
        return self.cfg

    def stats(self) -> dict:
        return {"enabled": self.active, "store": str(self.db) if self.store is not None else None,
                "queued": self.queue.qsize(), "pending": len(self.pending), **vars(self.counts)}

    # the request path: cheap, no I/O

    def begin(self, exp_id: str) -> None:
        with self.changed:
            self.pending.add(exp_id)

    def submit(self, ex: Exchange) -> None:
        try:
            self.queue.put_nowait(ex)
        except queue.Full:
            self.counts.dropped += 1
            self.done(ex.id)

    def done(self, exp_id: str) -> None:
        with self.changed:
            self.pending.discard(exp_id)
            self.changed.notify_all()

    # the writer

    def wait_written(self, exp_id: str, timeout: float = 10.0) -> bool:
        """Wait until the answer with this id is stored (or dropped); False on timeout."""
        with self.changed:
            return self.changed.wait_for(lambda: exp_id not in self.pending, timeout)

    def _run(self) -> None:
        while True:
            try:
                item = self.queue.get(timeout=SETTING_TTL_S)
            except queue.Empty:
                item = None
            if time.monotonic() - self.read_at >= SETTING_TTL_S:
                self.try_refresh()
            if item is _STOP:
                return
            if item is not None:
                self.write(item)

    def try_refresh(self) -> None:
        """Read the buffer setting now; on an error keep the last one (counted in last_error)."""
        try:
            self.refresh()
        except Exception as exc:  # noqa: BLE001 - keep the last setting; try again later
            self.counts.last_error = f"reading the buffer setting: {type(exc).__name__}"

    def write(self, ex: Exchange) -> str:
        """Store one exchange (what the writer thread does with each): 'recorded', 'discarded' or 'failed'."""
        try:
            if not self.cfg.enabled or self.store is None:
                self.counts.discarded += 1
                return "discarded"
            buffer.record(self.store, to_recorded(ex, self.api_key))
            self.counts.recorded += 1
            if self.counts.recorded % PRUNE_EVERY == 1:
                self.counts.pruned += buffer.prune(self.store, self.cfg)
            return "recorded"
        except Exception as exc:  # noqa: BLE001 - counted; the type only: a message could quote what was asked
            self.counts.failed += 1
            self.counts.last_error = type(exc).__name__
            print(f"nightschool serve: answer {ex.id} was not recorded ({type(exc).__name__})", file=sys.stderr)
            return "failed"
        finally:
            self.done(ex.id)

    # feedback

    def entry(self, exp_id: str) -> dict:
        """The stored entry, once a pending write of it is done."""
        self._require_store()
        self.wait_written(exp_id)
        try:
            return buffer.get(self.store, exp_id)
        except ExperienceError as exc:
            raise Refused(404, exc.message, exc.why, exc.fix) from exc

    def feedback(self, exp_id: str, rating: str, correction: Any = None, note: str = "") -> dict:
        """A client's thumbs up/down (and corrected answer) on a recorded answer, after its pending write."""
        self._require_store()
        self.wait_written(exp_id)
        with self.store.session() as s:
            if s.get(ExperienceRow, exp_id) is None:
                raise Refused(404, f"there is no experience {exp_id!r}",
                              why="it was not recorded (the buffer was off, or the answer failed) or retention deleted "
                                  "it", fix="send the X-Nightschool-Experience header of a recorded answer")
        try:
            return buffer.feedback(self.store, exp_id, rating, correction=correction, note=note, by="http")
        except ExperienceError as exc:
            raise Refused(422, exc.message, exc.why, exc.fix) from exc

    def _require_store(self) -> None:
        if self.store is None:
            raise Refused(409, "this server records no answers", why="it was started without --db",
                          fix="start it from the app or with `nightschool serve`")


def content_length(headers) -> int | None:
    """The Content-Length among ASGI response headers, or None (a streamed answer has none)."""
    value = next((v for name, v in headers if name.lower() == b"content-length"), b"").strip()
    return int(value) if value.isdigit() else None


class Capture:
    """One request passing through: its body and the response's bytes copied as they go, the id on the answer."""

    def __init__(self, recorder: Recorder, receive, send) -> None:
        self.recorder, self._receive, self._send = recorder, receive, send
        self.id, self.started, self.clock = uuid.uuid4().hex, time.time(), time.perf_counter()
        self.asked: list[bytes] = []
        self.answered: list[bytes] = []
        self.status, self.ended = 0, 0.0
        self.length: int | None = None  # the answer's Content-Length, when it has one
        self.sent = 0

    async def receive(self):
        message = await self._receive()
        if message["type"] == "http.request":
            self.asked.append(message.get("body", b""))
        return message

    async def send(self, message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            if self.status == 200:
                self.recorder.begin(self.id)
                self.length = content_length(message.get("headers", []))
                message = {**message, "headers": [*message.get("headers", []), (HEADER, self.id.encode())]}
        elif message["type"] == "http.response.body" and self.status == 200:
            body = message.get("body", b"")
            self.answered.append(body)
            self.sent += len(body)
            # the latency ends with the answer's last byte: a sized answer can be complete before its last message
            # (an HTTP middleware passes it on as a chunk holding every byte, then an empty end once the event loop
            # gets back to it: another thread may hold the GIL meanwhile, and the client already has its answer)
            last = not message.get("more_body", False) or (self.length is not None and self.sent >= self.length)
            if last and not self.ended:
                self.ended = time.perf_counter()
        await self._send(message)

    def hand_over(self, scope, route: str) -> None:
        """Queue the exchange for the writer (an answer cut off because the client left is not kept)."""
        if self.status != 200:
            return
        if not self.ended:
            self.recorder.done(self.id)
            return
        headers = dict(scope.get("headers") or [])
        model, sha = self.recorder.served()
        self.recorder.submit(Exchange(
            id=self.id, route=route, request=b"".join(self.asked), response=b"".join(self.answered),
            started=self.started, latency_ms=(self.ended - self.clock) * 1000, model=model, model_sha256=sha,
            client_header=headers.get(CLIENT_HEADER, b"").decode("latin-1"),
            user_agent=headers.get(b"user-agent", b"").decode("latin-1")))


class RecordingMiddleware:
    """Pure ASGI: tags each answered OpenAI request with an experience id (response header) and hands request and
    response bytes to the recorder after the last byte went out. Nothing is parsed, scrubbed or stored here."""

    def __init__(self, app, recorder: Recorder) -> None:
        self.app, self.recorder = app, recorder

    async def __call__(self, scope, receive, send) -> None:
        route = ROUTES.get(scope.get("path", "")) if scope["type"] == "http" else None
        if route is None or scope.get("method") != "POST" or not self.recorder.active:
            await self.app(scope, receive, send)
            return
        capture = Capture(self.recorder, receive, send)
        try:
            await self.app(scope, capture.receive, capture.send)
        finally:
            capture.hand_over(scope, route)

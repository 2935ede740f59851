"""Gemini CLI chat recordings (~/.gemini/tmp/<project>/chats/session-*.jsonl, or one older JSON file) as Sessions."""
from __future__ import annotations

import json
from pathlib import Path, PurePath
from typing import Any

import msgspec

from app.core.base.lines import BAD, Reading, ReadResult, Record, head, loads, read_jsonl
from app.core.capture.session import Message, Part, Session

SYSTEM_TYPES = ("info", "error", "warning")
ERROR_STATUSES = ("error", "cancelled")
FINISHED_STATUSES = ("success", *ERROR_STATUSES)
TOKEN_KEYS = {"input": "input_tokens", "output": "output_tokens", "cached": "cache_read_input_tokens",
              "thoughts": "reasoning_output_tokens", "tool": "tool_use_prompt_tokens"}
MAX_DOCUMENT_BYTES = 256 * 1024**2  # a single-document session larger than this is not loaded
TYPES = {"user", "gemini", "info", "error", "warning"}  # a message record's
BOM = "\ufeff".encode()
document_value = msgspec.json.decode  # a document's bytes, strict UTF-8 (~6x json.loads on its text, the same values)


def parse_gemini(path: str | Path, final: bool = False, progress: Reading | None = None) -> Session:
    """Replay the recording: a repeated id replaces its record, $set updates metadata, $rewindTo truncates (records
    are held to the end: a later $set or $rewindTo may change any of them)."""
    result = _read(path, final, progress)
    session = Session(agent="gemini", session_id=PurePath(path).stem, source_path=str(path),
                      lines=result.lines, problems=list(result.problems), blank=result.blank,
                      end_offset=result.end_offset)
    replay = _Replay(session)
    for record in result.records:
        replay.accept(record.line, record.data)
    replay.finish(PurePath(path))
    return session


def detect(rec: dict) -> bool:
    """The session's metadata line, a $set or $rewindTo line, or a message record (an id, content, no uuid)."""
    if isinstance(rec.get("sessionId"), str) and "projectHash" in rec and "type" not in rec:
        return True
    if "$rewindTo" in rec or "$set" in rec:
        return True
    return rec.get("type") in TYPES and isinstance(rec.get("id"), str) and "content" in rec \
        and "uuid" not in rec and "message" not in rec


def document(doc: dict) -> bool:
    """The older recording: one JSON document {sessionId, projectHash, messages}."""
    if not isinstance(doc.get("messages"), list):
        return False
    typed = [m for m in doc["messages"] if isinstance(m, dict) and m.get("type") in TYPES]
    return "sessionId" in doc and ("projectHash" in doc or bool(typed))


def resembles(rec: dict) -> bool:
    """Broadly: its ids or edits, or a user/gemini record with an id (a typed record with a uuid, sessionId or
    message is not one of its records)."""
    if "type" in rec and any(k in rec for k in ("uuid", "sessionId", "message")):
        return False
    return any(k in rec for k in ("sessionId", "$set", "$rewindTo")) or (
        "id" in rec and rec.get("type") in ("user", "gemini"))


def _read(path: str | Path, final: bool = False, progress: Reading | None = None) -> ReadResult:
    """JSONL; or, when the first line is not JSON, the older format: one JSON document {sessionId, messages}, read
    whole at once (not line by line first: each line of a pretty-printed document would be a problem)."""
    first = head(path, 1)
    if first and first[0] is BAD:
        found = _document(Path(path), progress)
        if found is not None:
            return found
    return read_jsonl(path, final=final, progress=progress)


def _document(path: Path, progress: Reading | None) -> ReadResult | None:
    """The whole file as one JSON object (the whole document is one record); None when it is not one."""
    size = path.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        return None
    raw = path.read_bytes()
    while raw.startswith(BOM):
        raw = raw[len(BOM):]
    try:
        document = document_value(raw)
    except (ValueError, RecursionError):  # invalid UTF-8 becomes U+FFFD; NaN and the like are json.loads'
        document = loads(raw.decode("utf-8", errors="replace"))
    if not isinstance(document, dict):
        return None
    if progress:
        progress(path, size, size)
    return ReadResult(records=[Record(1, 0, document)], lines=1, end_offset=size)


class _Replay:
    """The recording's state as Gemini CLI rebuilds it: records by id in first-seen order, plus metadata."""

    def __init__(self, session: Session):
        self.s = session
        self.meta: dict[str, Any] = {}
        self.records: dict[str, tuple[int, dict, bool]] = {}  # id -> (line, record, came in a $set.messages)

    def accept(self, line: int, data: Any) -> None:
        if not isinstance(data, dict):
            self.s.problems.append((line, "not a JSON object"))
        elif isinstance(data.get("$rewindTo"), str):
            self.rewind(line, data["$rewindTo"])
        elif isinstance(data.get("$set"), dict):
            self.update(line, data["$set"], initial=False)
        elif isinstance(data.get("id"), str):
            self.records[data["id"]] = (line, data, False)  # a repeated id keeps its place
        elif "sessionId" in data or isinstance(data.get("messages"), list):
            self.update(line, data, initial=True)
        else:
            self.s.problems.append((line, "neither a message (id), session metadata, $set nor $rewindTo"))

    def update(self, line: int, fields: dict, initial: bool) -> None:
        self.meta.update({k: v for k, v in fields.items() if k != "messages"})
        if isinstance(fields.get("messages"), list):
            self.set_messages(line, fields["messages"], synthetic=not initial)

    def set_messages(self, line: int, messages: list, synthetic: bool) -> None:
        """The older format's list, or a $set that rewrites the model's history (compression, masking).

        A rewrite keeps what really happened: known ids keep their recorded version, ids first seen here are
        added as meta (the harness made them, e.g. a compression summary), dropped ids stay and count as a
        compaction.
        """
        given = set()
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                self.s.problems.append((line, f"messages[{index}] is not an object"))
                continue
            key = message.get("id") if isinstance(message.get("id"), str) else f"{line}#{index}"
            given.add(key)
            if not synthetic or key not in self.records:
                self.records[key] = (line, message, synthetic)
        if synthetic and any(key not in given for key in self.records):
            self.s.compactions += 1

    def rewind(self, line: int, target: str) -> None:
        """Gemini CLI removes the target and everything after it (an unknown target clears the history)."""
        ids = list(self.records)
        if target not in self.records:
            self.s.problems.append((line, f"$rewindTo {target!r}: no such message, history cleared as Gemini does"))
        removed = ids[ids.index(target):] if target in self.records else ids
        branch = self.convert([self.records.pop(key) for key in removed])
        if branch:
            self.s.abandoned.append(branch)

    def convert(self, items: list[tuple[int, dict, bool]]) -> list[Message]:
        call_ids = {c.get("id") for _, rec, _ in items for c in _calls(rec)}  # recorded tool calls
        out: list[Message] = []
        for line, rec, synthetic in items:
            out.extend(self.messages_of(line, rec, synthetic, call_ids))
        return out

    def messages_of(self, line: int, rec: dict, synthetic: bool, call_ids: set) -> list[Message]:
        kind, common = rec.get("type"), dict(id=rec.get("id"), timestamp=rec.get("timestamp"), line=line)
        if kind == "user":
            parts = _content_parts(rec.get("content"), call_ids)
            role = "tool" if parts and all(p.kind == "tool_result" for p in parts) else "user"
            return [Message(role, parts, meta=synthetic, **common)]
        if kind == "gemini":
            return _gemini(rec, synthetic, call_ids, common)
        if kind in SYSTEM_TYPES:
            return [Message("system", _content_parts(rec.get("content"), call_ids), meta=True, **common)]
        self.s.skipped[kind if isinstance(kind, str) else "(no type)"] += 1
        return []

    def finish(self, path: PurePath) -> None:
        s, meta = self.s, self.meta
        s.messages = self.convert(list(self.records.values()))
        s.session_id = str(meta.get("sessionId") or s.session_id)
        dirs = meta.get("directories")
        s.cwd = dirs[0] if isinstance(dirs, list) and dirs and isinstance(dirs[0], str) else None
        folder = path.parent.parent.name if path.parent.name == "chats" else None  # <projectHash or slug>/chats/
        s.project = (PurePath(s.cwd).name if s.cwd else None) or folder or meta.get("projectHash")
        s.model = next((m.model for m in reversed(s.messages) if m.model), None)
        stamps = [m.timestamp for m in s.messages if m.timestamp]
        s.started_at = meta.get("startTime") or (stamps[0] if stamps else None)
        s.ended_at = meta.get("lastUpdated") or (stamps[-1] if stamps else None)


def _gemini(rec: dict, synthetic: bool, call_ids: set, common: dict) -> list[Message]:
    """The model's message (thoughts, text, tool calls) and one tool message per finished tool call."""
    thoughts = rec.get("thoughts") if isinstance(rec.get("thoughts"), list) else []
    parts = [Part("thinking", text) for text in map(_thought, thoughts) if text]
    parts += _content_parts(rec.get("content"), call_ids)
    parts += [Part("tool_call", tool_name=c.get("name"), tool_input=c.get("args"), call_id=c.get("id"))
              for c in _calls(rec)]
    model = rec.get("model") if isinstance(rec.get("model"), str) else None
    out = [Message("assistant", parts, model=model, usage=_usage(rec.get("tokens")), meta=synthetic, **common)]
    for call in _calls(rec):
        if call.get("status") in FINISHED_STATUSES or call.get("result") is not None:
            text, failed = _result(call)
            part = Part("tool_result", text, tool_name=call.get("name"), call_id=call.get("id"),
                        is_error=failed or call.get("status") in ERROR_STATUSES)
            out.append(Message("tool", [part], parent_id=rec.get("id"), line=common["line"],
                               timestamp=call.get("timestamp") or rec.get("timestamp")))
    return out


def _calls(rec: dict) -> list[dict]:
    calls = rec.get("toolCalls") if rec.get("type") == "gemini" else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _thought(thought: Any) -> str:
    if isinstance(thought, str):
        return thought
    if not isinstance(thought, dict):
        return ""
    return "\n".join(t for t in (thought.get("subject"), thought.get("description")) if isinstance(t, str) and t)


def _content_parts(content: Any, call_ids: set) -> list[Part]:
    """Parts of a content value: a string, one Part object or a list of them (text, thought, data, calls)."""
    if isinstance(content, str):
        return [Part("text", content)] if content else []
    parts: list[Part] = []
    for item in content if isinstance(content, list) else [content]:
        if isinstance(item, str) and item:
            parts.append(Part("text", item))
        elif isinstance(item, dict):
            parts.extend(_part(item, call_ids))
    return parts


def _part(item: dict, call_ids: set) -> list[Part]:
    """One Gemini API Part; calls and responses the record's toolCalls already hold are not repeated."""
    call, response = item.get("functionCall"), item.get("functionResponse")
    if isinstance(item.get("text"), str) and item["text"]:
        return [Part("thinking" if item.get("thought") else "text", item["text"])]
    if isinstance(call, dict) and call.get("id") not in call_ids:
        return [Part("tool_call", tool_name=call.get("name"), tool_input=call.get("args"), call_id=call.get("id"))]
    if isinstance(response, dict) and response.get("id") not in call_ids:
        text, failed = _response_text(response)
        return [Part("tool_result", text, tool_name=response.get("name"), call_id=response.get("id"),
                     is_error=failed)]
    data = item.get("inlineData") or item.get("fileData")
    if isinstance(data, dict):
        return [Part("image", str(data.get("mimeType") or "image"))]
    return []


def _result(call: dict) -> tuple[str, bool]:
    """(text, is_error) of a tool call's result: Parts holding functionResponse {output | error}, or text."""
    result = call.get("result")
    texts, failed = [], False
    for item in result if isinstance(result, list) else [result]:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict) and isinstance(item.get("functionResponse"), dict):
            text, bad = _response_text(item["functionResponse"])
            texts.append(text)
            failed = failed or bad
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            texts.append(item["text"])
    text = "\n".join(t for t in texts if t)
    if not text:
        fallback = call.get("error") or call.get("resultDisplay")
        text = fallback if isinstance(fallback, str) else ""
    return text, failed


def _response_text(response: dict) -> tuple[str, bool]:
    body = response.get("response")
    if not isinstance(body, dict):
        return ("" if body is None else str(body)), False
    for key, failed in (("output", False), ("error", True), ("content", False)):
        if key in body:
            value = body[key]
            return (value if isinstance(value, str) else json.dumps(value)), failed
    return json.dumps(body), False


def _usage(tokens: Any) -> dict[str, int]:
    tokens = tokens if isinstance(tokens, dict) else {}
    return {ours: n for theirs, ours in TOKEN_KEYS.items() if type(n := tokens.get(theirs)) is int and n}

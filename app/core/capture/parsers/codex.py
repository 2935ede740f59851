"""Codex CLI rollouts ($CODEX_HOME/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl) read into the session model."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path, PurePath
from typing import Any, Iterable, Iterator

from app.core.base.lines import BAD, Reading, Record, loads, stream_jsonl
from app.core.capture.parsers.records import UNSET, CodexItem, codex_line, codex_record, given
from app.core.capture.session import Message, Part, Session

# user-role messages the harness writes itself (not typed by the person)
HARNESS_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions for", "<INSTRUCTIONS>")
CALL_ITEMS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")
OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output")
LEGACY_ITEMS = ("message", "reasoning", *CALL_ITEMS, *OUTPUT_ITEMS)  # older rollouts: items without an envelope
# event_msg types that echo a response item: (role, part kind), to drop the duplicate
ECHO_EVENTS = {"user_message": ("user", "text"), "agent_message": ("assistant", "text"),
               "agent_reasoning": ("assistant", "thinking")}
USAGE_KEYS = {"input_tokens": "input_tokens", "output_tokens": "output_tokens",
              "cached_input_tokens": "cache_read_input_tokens", "reasoning_output_tokens": "reasoning_output_tokens"}
EXIT_CODE = re.compile(r"\s*Exit code: (-?\d+)")
ERROR_TEXT = re.compile(r"\s*(exec command rejected|patch rejected|apply_patch verification failed|aborted"
                        r"|failed to parse function arguments|unsupported call|error:)", re.IGNORECASE)
HOLD_BYTES = 32 * 1024**2  # a rollout up to this size is read once, its records held; a bigger one is read twice
TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}  # a record's envelope
BARE_ITEMS = {"message", "reasoning", "function_call", "function_call_output", "local_shell_call"}  # older, without
UUID_TAIL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)


def parse_codex(path: str | Path, final: bool = False, progress: Reading | None = None) -> Session:
    """Read one rollout; unknown record types are counted in session.skipped, unusable lines kept in problems.

    Which events echo a response item is known only from the whole file: a rollout over HOLD_BYTES is read twice
    (the echoes, then the replay up to where the first pass stopped), so none of its records is held."""
    path = Path(path)
    match = UUID_TAIL.search(path.stem)
    session = Session(agent="codex", session_id=match.group(0) if match else path.stem, source_path=str(path))
    stream = stream_jsonl(path, final=final, progress=progress, typed=codex_line)
    records: Iterable[Record] = stream
    if path.stat().st_size <= HOLD_BYTES:
        records = list(stream)
        echoes = Counter(_echo_keys(records))
    else:
        first = stream_jsonl(path, final=final, typed=codex_line)
        echoes = Counter(_echo_keys(first))
        stream.until = first.end_offset
    rollout = _Rollout(session, echoes)
    for record in records:
        rollout.record(record.line, record.data)
    session.lines, session.blank, session.end_offset = stream.lines, stream.blank, stream.end_offset
    session.problems = stream.problems + session.problems  # the reader's first, as they were
    rollout.finish()
    return session


def detect(rec: dict) -> bool:
    """A rollout record in its envelope, or a response item of an older rollout without one."""
    kind = rec.get("type")
    if kind in TYPES and "payload" in rec:
        return True
    return kind in BARE_ITEMS and "payload" not in rec and ("role" in rec or "call_id" in rec or "summary" in rec) \
        and "message" not in rec


def resembles(rec: dict) -> bool:
    return {"timestamp", "type", "payload"} <= rec.keys()


class _Rollout:
    """Replays the records in order, merging the items of one model response into one assistant message."""

    def __init__(self, session: Session, echoes: Counter):
        self.s = session
        self.model: str | None = None
        self.open: Message | None = None  # the assistant message the current response adds to
        self.last_assistant: Message | None = None
        self.calls: dict[str, str | None] = {}  # call_id -> tool name
        self.echoes = echoes  # texts the response items carry
        self.total: dict[str, int] = {}  # the last total_token_usage seen
        self.pending: Counter = Counter()  # usage reported before any assistant message
        self.meta_seen = False
        self.first_ts = self.last_ts = None  # the span of the records' timestamps

    def record(self, line: int, data: Any) -> None:
        if isinstance(data, dict):  # a line that did not fit the typed item: its plain values
            data = codex_record(data)
        if not isinstance(data, CodexItem):
            return self.s.problems.append((line, "not a JSON object"))
        kind, payload = self._envelope(data)
        ts = data.timestamp if isinstance(data.timestamp, str) else None
        if not isinstance(kind, str):
            return self.s.problems.append((line, "record without a type"))
        handler = HANDLERS.get(kind)
        if handler is None:
            self.s.skipped[kind] += 1
        elif not isinstance(payload, CodexItem):
            self.s.problems.append((line, f"{kind} record without an object payload"))
        else:
            self.first_ts, self.last_ts = self.first_ts or ts, ts or self.last_ts
            handler(self, payload, line, ts)

    def _envelope(self, data: CodexItem) -> tuple[Any, Any]:
        """(type, payload); older rollouts wrote bare items, a bare meta first line and record_type markers."""
        kind = data.type
        if kind in LEGACY_ITEMS and data.payload is UNSET:
            return "response_item", data
        if kind is None and data.record_type is not UNSET:
            return f"record_type:{data.record_type}", None
        if kind is None and not self.meta_seen and data.id is not UNSET and data.timestamp is not UNSET:
            return "session_meta", data
        return kind, given(data.payload)

    def session_meta(self, p: CodexItem, line: int, ts: str | None) -> None:
        if self.meta_seen:  # a fork or resume may repeat it: the first one names this file's session
            return self.s.skipped.update(["session_meta:repeat"])
        self.meta_seen = True
        self.s.session_id = str(given(p.id) or self.s.session_id)
        self._set_cwd(p.cwd)
        self.s.agent_version = p.cli_version or self.s.agent_version
        git = p.git if isinstance(p.git, dict) else {}
        self.s.git_branch = git.get("branch") or self.s.git_branch
        self.s.started_at = given(p.timestamp) or ts

    def turn_context(self, p: CodexItem, line: int, ts: str | None) -> None:
        self.model = self.s.model = p.model or self.model
        self._set_cwd(self.s.cwd or p.cwd)
        self.open = None

    def _set_cwd(self, cwd: Any) -> None:
        if isinstance(cwd, str) and cwd and (cwd != self.s.cwd or not self.s.project):  # each turn repeats it
            self.s.cwd, self.s.project = cwd, PurePath(cwd.rstrip("/\\") or cwd).name or cwd

    def response_item(self, p: CodexItem, line: int, ts: str | None) -> None:
        kind = p.type
        if kind == "message":
            self._message(p, line, ts)
        elif kind == "reasoning":
            self._assistant(_reasoning_parts(p), p, line, ts)
        elif kind in CALL_ITEMS:
            part = _call_part(p)
            self.calls[part.call_id or ""] = part.tool_name
            self._assistant([part], p, line, ts)
        elif kind in OUTPUT_ITEMS:
            call_id = p.call_id
            text, is_error = _tool_output(p.output)
            part = Part("tool_result", text, self.calls.get(call_id or ""), call_id=call_id, is_error=is_error)
            self._append(Message("tool", [part], timestamp=ts, line=line))
        else:
            self.s.skipped[f"response_item:{kind}"] += 1

    def event_msg(self, p: CodexItem, line: int, ts: str | None) -> None:
        kind = p.type
        if kind in ECHO_EVENTS:
            self._echo(ECHO_EVENTS[kind], p, line, ts)
        elif kind == "token_count":
            self._token_count(p.info)
        elif kind == "turn_aborted":
            text = f"turn aborted: {p.reason or 'unknown reason'}"
            self._append(Message("system", [Part("text", text)], timestamp=ts, meta=True, line=line))
        else:
            self.s.skipped[f"event_msg:{kind}"] += 1

    def compacted(self, p: CodexItem, line: int, ts: str | None) -> None:
        self.s.compactions += 1
        text = p.message
        if isinstance(text, str) and text.strip():
            self._append(Message("user", [Part("text", text)], timestamp=ts, compact_summary=True, line=line))

    def _message(self, p: CodexItem, line: int, ts: str | None) -> None:
        parts, role = _content_parts(p.content), p.role
        if role == "assistant":
            self._assistant(parts, p, line, ts)
        elif role == "user":
            meta = _is_harness("\n".join(x.text for x in parts if x.kind == "text"))
            self._append(Message("user", parts, id=given(p.id), timestamp=ts, meta=meta, line=line))
        elif role in ("developer", "system"):
            self._append(Message("system", parts, id=given(p.id), timestamp=ts, meta=True, line=line))
        else:
            self.s.skipped[f"response_item:message:{role}"] += 1

    def _echo(self, key: tuple[str, str], p: CodexItem, line: int, ts: str | None) -> None:
        """An event repeating a response item's text is dropped; one no response item carries is kept."""
        text = p.text if p.message is UNSET else p.message
        echo = (*key, text.strip() if isinstance(text, str) else "")
        if not echo[2]:
            return
        if self.echoes[echo] > 0:
            self.echoes[echo] -= 1
        elif key[0] == "user":
            self._append(Message("user", [Part("text", text)], timestamp=ts, meta=_is_harness(text), line=line))
        else:
            self._assistant([Part(key[1], text)], p, line, ts)

    def _assistant(self, parts: list[Part], p: CodexItem, line: int, ts: str | None) -> None:
        if not parts:
            return self.s.skipped.update([f"response_item:{p.type}:empty"])
        if self.open is None:
            self.open = Message("assistant", id=given(p.id), timestamp=ts, model=self.model, line=line)
            self.s.messages.append(self.open)
            self.last_assistant = self.open
            _add_usage(self.open, self.pending)
            self.pending = Counter()
        self.open.parts.extend(parts)

    def _append(self, message: Message) -> None:
        self.s.messages.append(message)
        self.open = None

    def _token_count(self, info: Any) -> None:
        """Each report's growth of total_token_usage goes to the latest assistant message: the sum is the total."""
        if not isinstance(info, dict):
            return  # a rate-limit-only report
        total, last = _usage(info.get("total_token_usage")), _usage(info.get("last_token_usage"))
        delta = last
        if total:
            delta = {k: v - self.total.get(k, 0) for k, v in total.items()}
            if any(v < 0 for v in delta.values()):  # the counter restarted
                delta = last or total
            self.total = total
        if self.last_assistant is None:
            self.pending.update(delta)
        else:
            _add_usage(self.last_assistant, delta)
        self.open = None  # a report closes the response it counts

    def finish(self) -> None:
        if self.s.messages:
            _add_usage(self.s.messages[-1], self.pending)
        self.s.started_at = self.s.started_at or self.first_ts
        self.s.ended_at = self.last_ts


HANDLERS = {"session_meta": _Rollout.session_meta, "turn_context": _Rollout.turn_context,
            "compacted": _Rollout.compacted, "response_item": _Rollout.response_item, "event_msg": _Rollout.event_msg}


def _echo_keys(records: Iterable[Record]) -> Iterator[tuple[str, str, str]]:
    """(role, kind, text) of every text a response item carries."""
    for record in records:
        data = codex_record(record.data) if isinstance(record.data, dict) else record.data
        if not isinstance(data, CodexItem):
            continue
        item = data.payload if data.type == "response_item" else data
        if not isinstance(item, CodexItem):
            continue
        if item.type == "message" and item.role in ("user", "assistant"):
            text = "\n".join(p.text for p in _content_parts(item.content) if p.kind == "text")
            yield item.role, "text", text.strip()
        elif item.type == "reasoning":
            yield from (("assistant", "thinking", p.text.strip()) for p in _reasoning_parts(item))


def _content_parts(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [Part("text", content)] if content else []
    parts = []
    for block in content if isinstance(content, list) else []:
        block = block if isinstance(block, dict) else {}
        text, url = block.get("text", block.get("refusal")), str(block.get("image_url") or "")
        if isinstance(text, str):
            parts.append(Part("text", text))
        elif block.get("type") == "input_image":  # a data: URL names its media type
            parts.append(Part("image", url[5:].split(";")[0].split(",")[0] if url.startswith("data:") else "image"))
    return parts


def _reasoning_parts(item: CodexItem) -> list[Part]:
    """The readable reasoning: the summary, else raw reasoning text (encrypted content is not readable)."""
    for blocks in (item.summary, item.content):
        blocks = blocks if isinstance(blocks, list) else []
        texts = [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str) and b["text"]]
        if texts:
            return [Part("thinking", t) for t in texts]
    return []


def _call_part(item: CodexItem) -> Part:
    kind, call_id = item.type, item.call_id or given(item.id)
    if kind == "function_call":
        name, args = item.name, _arguments(item.arguments)
    elif kind == "custom_tool_call":
        name, args = item.name, item.input  # freeform input (e.g. a patch): kept as written
    else:
        name, args = ("local_shell" if kind == "local_shell_call" else "web_search"), item.action
    return Part("tool_call", tool_name=name, tool_input=args, call_id=call_id)


def _arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    value = loads(raw)
    return raw if value is BAD else value  # not JSON: keep what the model wrote


def _tool_output(output: Any) -> tuple[str, bool]:
    """(text, is_error) of a tool output: a string, a JSON string {output, metadata.exit_code}, or content items."""
    if isinstance(output, list):
        return "\n".join(p.text for p in _content_parts(output) if p.kind == "text"), False
    parsed = _arguments(output) if isinstance(output, str) and output.lstrip().startswith("{") else None
    output = parsed if isinstance(parsed, dict) and ("output" in parsed or "metadata" in parsed) else output
    if isinstance(output, str):
        return output, _says_error(output)
    if not isinstance(output, dict):
        return ("" if output is None else json.dumps(output)), False
    text = output.get("output", output.get("content"))
    text = text if isinstance(text, str) else "" if text is None else json.dumps(text)
    code = (output.get("metadata") if isinstance(output.get("metadata"), dict) else {}).get("exit_code")
    if type(code) is int:
        return text, code != 0
    return text, output.get("success") is False or _says_error(text)


def _says_error(text: str) -> bool:
    match = EXIT_CODE.match(text)
    return int(match.group(1)) != 0 if match else bool(ERROR_TEXT.match(text))


def _is_harness(text: str) -> bool:
    return text.lstrip().startswith(HARNESS_PREFIXES)


def _usage(raw: Any) -> dict[str, int]:
    raw = raw if isinstance(raw, dict) else {}
    return {ours: raw[theirs] for theirs, ours in USAGE_KEYS.items() if type(raw.get(theirs)) is int}


def _add_usage(message: Message, usage: dict[str, int]) -> None:
    message.usage.update({key: message.usage.get(key, 0) + value for key, value in usage.items() if value})

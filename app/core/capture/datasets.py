"""Dataset files dropped on the app (chat, ShareGPT, Alpaca, preference): detect the format, quick-check each record."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from app.core.chatdata import ROLES, check_record
from app.core.fingerprint import sha256_file

MAX_BYTES = 2 * 1024**3  # a bigger file is refused unread
MAX_LINE_BYTES = 16 * 1024**2  # a longer line is a problem, not parsed
MAX_HEAD_BYTES = 32 * 1024**2  # detection reads no further than this
MAX_DOCUMENT_BYTES = 256 * 1024**2  # a bigger single JSON document is not loaded
BINARY_SNIFF_BYTES = 8192
MAX_UNDECODABLE = 0.05  # share of bytes in the head that may be invalid UTF-8 before the file counts as binary
VOTE_RECORDS = 20  # check_dataset: records that vote on the format
SNIFF_RECORDS = 5  # looks_like_dataset: records looked at
SHOWN_PROBLEMS = 3
SHAREGPT_SPEAKERS = {"human", "gpt", "system", "tool", "function_call", "observation"}
SHAREGPT_ROLES = {"user": "human", "assistant": "gpt"}  # role/content turns, mapped onto from/value speakers
# Dataset shapes we recognise but cannot train on, so a refusal can name them.
UNSUPPORTED_SHAPES = [
    ({"prompt", "completion"}, "prompt/completion pairs"),
    ({"chosen", "rejected"}, "preference pairs without a `prompt`"),
    ({"question", "answer"}, "question/answer pairs"),
    ({"input", "output"}, "input/output pairs without an `instruction`"),
    ({"text"}, "plain text (`text`)"),
]
_BAD = object()  # a line that is not valid JSON (or is too long to parse)


@dataclass(frozen=True)
class DatasetSpec:
    """One accepted dataset format: the keys that identify it, an example line and its quick per-record check."""
    name: str
    required: tuple[str, ...]
    example: str
    check: Callable[[dict], str | None]  # why a record (with the required keys) is unusable, or None

    def detect(self, rec: object) -> bool:
        return isinstance(rec, dict) and all(k in rec for k in self.required)

    def keys(self) -> str:
        return "/".join(f"`{k}`" for k in self.required)


@dataclass
class DatasetCheck:
    """The verdict on one dropped file. For a JSON array document each array item counts as a line."""
    path: Path
    spec: str | None = None
    accepted: bool = False
    reason: str = ""  # '' when accepted, else what was refused, why, and what to do
    lines: int = 0
    records: int = 0
    blank: int = 0
    problems: list[tuple[int, str]] = field(default_factory=list)  # (1-based line, reason)
    sha256: str = ""  # '' when the file was refused before it was read through
    layout: str = "jsonl"  # or "json-array"

    def summary(self) -> str:
        return (f"{self.lines} lines: {self.records} usable, {len(self.problems)} set aside, "
                f"{self.blank} blank")


# --- quick checks, one per spec ---------------------------------------------------------------------------------

def _type(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _text_of(i: int, content: object) -> object:
    """A list of text content parts joined into one string; other content returned as it is."""
    if not isinstance(content, list):
        return content
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else _type(part)
            raise ValueError(f"message {i} content part {j} is {kind!r}, not a text part: only text is trained on")
        texts.append(part["text"])
    return "".join(texts)


def _plain(msgs: list) -> list:
    """Messages with their content parts joined into strings, so chatdata.check_record can judge them."""
    return [{**m, "content": _text_of(i, m.get("content"))} if isinstance(m, dict) else m
            for i, m in enumerate(msgs)]


def _arguments_parse(args: object) -> bool:
    if isinstance(args, dict):
        return True
    try:
        json.loads(args)  # type: ignore[arg-type]
        return True
    except (TypeError, ValueError):
        return False


def _tool_calls_problem(i: int, calls: object) -> str | None:
    if not isinstance(calls, list):
        return f"message {i} `tool_calls` is {_type(calls)}, expected a list"
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"].strip():
            return f"message {i} tool call {j} has no `function` with a `name`"
        if not _arguments_parse(fn.get("arguments")):
            return f"message {i} tool call {j} ({fn['name']}) `arguments` is not valid JSON"
    return None


def _message_problem(i: int, msg: dict) -> str | None:
    """What chatdata.check_record leaves unchecked: empty turns, tool calls, tool results."""
    role, text = msg["role"], msg.get("content") or ""
    if role == "user" and not text.strip():
        return f"message {i} (user) is empty"
    if role == "assistant" and not text.strip() and not msg.get("tool_calls"):
        return f"message {i} (assistant) has neither content nor tool_calls"
    if role == "tool" and not (isinstance(msg.get("tool_call_id"), str) and msg["tool_call_id"]):
        return f"message {i} (tool) has no `tool_call_id`"
    if msg.get("tool_calls") is not None:
        if role != "assistant":
            return f"message {i} ({role}) has tool_calls; only assistant messages call tools"
        return _tool_calls_problem(i, msg["tool_calls"])
    return None


def check_chat(rec: dict) -> str | None:
    """chat_sft_v1: OpenAI chat `messages` (content a string, null or text parts) with optional tool calls."""
    msgs = rec["messages"]
    try:
        rec = {**rec, "messages": _plain(msgs) if isinstance(msgs, list) else msgs}
    except ValueError as exc:
        return str(exc)
    if problem := check_record(rec):
        return problem
    if "tools" in rec and not isinstance(rec["tools"], list):
        return f"`tools` is {_type(rec['tools'])}, expected a list"
    return next((p for i, m in enumerate(rec["messages"]) if (p := _message_problem(i, m))), None)


def _speaker(turn: dict) -> object:
    role = turn["from"] if "from" in turn else turn.get("role")
    return SHAREGPT_ROLES.get(role, role) if isinstance(role, str) else role


def _turn_problem(i: int, turn: object) -> str | None:
    if not isinstance(turn, dict):
        return f"turn {i} is not an object"
    speaker, text = _speaker(turn), turn["value"] if "value" in turn else turn.get("content")
    if speaker not in SHAREGPT_SPEAKERS:
        return f"turn {i} is from {speaker!r}; expected one of {sorted(SHAREGPT_SPEAKERS)}"
    if not isinstance(text, str):
        return f"turn {i} ({speaker}) `value` is {_type(text)}, expected a string"
    if speaker in ("human", "gpt") and not text.strip():
        return f"turn {i} ({speaker}) is empty"
    return None


def check_sharegpt(rec: dict) -> str | None:
    """sharegpt_v1: `conversations` of {from, value} (or {role, content}) turns with at least one gpt turn."""
    turns = rec["conversations"]
    if not isinstance(turns, list) or not turns:
        return "`conversations` must be a non-empty list"
    if problem := next((p for i, t in enumerate(turns) if (p := _turn_problem(i, t))), None):
        return problem
    if not any(_speaker(t) == "gpt" for t in turns):
        return "no `gpt` turn: there is nothing to learn from"
    return None


def _text_problem(key: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"`{key}` is {_type(value)}, expected a string"
    return None if value.strip() else f"`{key}` is empty"


def check_alpaca(rec: dict) -> str | None:
    """alpaca_v1: non-empty `instruction` and `output` strings, an optional `input` string."""
    if problem := _text_problem("instruction", rec["instruction"]) or _text_problem("output", rec["output"]):
        return problem
    if rec.get("input") is not None and not isinstance(rec["input"], str):
        return f"`input` is {_type(rec['input'])}, expected a string"
    return None


def _prompt_messages_problem(msgs: list) -> str | None:
    for i, msg in enumerate(msgs):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            return f"`prompt` message {i} needs a `role` among {sorted(ROLES)}"
        if not isinstance(msg.get("content"), str | list):
            return f"`prompt` message {i} has no text `content`"
    return None


def _side_problem(key: str, value: object) -> str | None:
    """A preference field: a non-empty string or a non-empty list of chat messages."""
    if isinstance(value, str):
        return _text_problem(key, value)
    if not isinstance(value, list) or not value:
        return f"`{key}` is {_type(value)}, expected a string or a non-empty list of messages"
    if key == "prompt":
        return _prompt_messages_problem(value)
    problem = check_chat({"messages": value})
    return f"`{key}`: {problem}" if problem else None


def check_preference(rec: dict) -> str | None:
    """preference_v1: `prompt`, `chosen` and `rejected` (strings or message lists), chosen differing from rejected."""
    if problem := next((p for k in ("prompt", "chosen", "rejected") if (p := _side_problem(k, rec[k]))), None):
        return problem
    chosen, rejected = rec["chosen"], rec["rejected"]
    if isinstance(chosen, str) and isinstance(rejected, str):
        chosen, rejected = chosen.strip(), rejected.strip()
    return "`chosen` and `rejected` are the same: the pair teaches nothing" if chosen == rejected else None


# The registry: nothing outside it is accepted.
SPECS: dict[str, DatasetSpec] = {s.name: s for s in [
    DatasetSpec("chat_sft_v1", ("messages",),
                '{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}',
                check_chat),
    DatasetSpec("sharegpt_v1", ("conversations",),
                '{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}',
                check_sharegpt),
    DatasetSpec("alpaca_v1", ("instruction", "output"), '{"instruction": "...", "input": "", "output": "..."}',
                check_alpaca),
    DatasetSpec("preference_v1", ("prompt", "chosen", "rejected"),
                '{"prompt": "...", "chosen": "...", "rejected": "..."}', check_preference),
]}


# --- recognising records ----------------------------------------------------------------------------------------

def transcript_kind(rec: object) -> str | None:
    """The agent whose session transcript this record comes from, or None for anything else."""
    if not isinstance(rec, dict):
        return None
    if {"timestamp", "type", "payload"} <= rec.keys():
        return "Codex CLI"
    if "type" in rec and any(k in rec for k in ("uuid", "sessionId", "message")):
        return "Claude Code"
    if any(k in rec for k in ("sessionId", "$set", "$rewindTo")) or (
            "id" in rec and rec.get("type") in ("user", "gemini")):
        return "Gemini CLI"
    return None


def spec_for(rec: object) -> DatasetSpec | None:
    """The registry spec a record belongs to; None for transcripts and unknown schemas (they are denied)."""
    if transcript_kind(rec):
        return None
    # the spec with the most required keys wins (a preference record may carry `messages` too)
    return next((s for s in sorted(SPECS.values(), key=lambda s: -len(s.required)) if s.detect(rec)), None)


def unsupported_shape(rec: object) -> str | None:
    """A dataset shape we know but do not train on, by name."""
    if not isinstance(rec, dict) or transcript_kind(rec):
        return None
    return next((name for keys, name in UNSUPPORTED_SHAPES if keys <= rec.keys()), None)


def accepted_formats() -> str:
    return ", ".join(f"{s.name} ({s.keys()})" for s in SPECS.values())


def record_problem(spec: DatasetSpec, rec: object) -> str | None:
    """Why one parsed record is not usable under spec, or None."""
    if not isinstance(rec, dict):
        return f"a record must be a JSON object, got {_type(rec)}"
    if missing := [k for k in spec.required if k not in rec]:
        fields = ", ".join(sorted(rec)[:8]) or "none"
        return f"missing {', '.join(f'`{k}`' for k in missing)} (fields: {fields})"
    return spec.check(rec)


# --- reading ----------------------------------------------------------------------------------------------------

def _raw_lines(fh: IO[bytes], digest: Any = None) -> Iterator[bytes | None]:
    """Each line's bytes, or None for one over MAX_LINE_BYTES (skipped unread); feeds digest everything read."""
    while raw := fh.readline(MAX_LINE_BYTES + 1):
        _feed(digest, raw)
        if len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield raw
            continue
        while rest := fh.readline(1 << 20):
            _feed(digest, rest)
            if rest.endswith(b"\n"):
                break
        yield None


def _feed(digest: Any, data: bytes) -> None:
    if digest is not None:
        digest.update(data)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").lstrip("\ufeff").rstrip("\r\n")


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return _BAD


def _jsonl_head(path: Path, limit: int) -> list[Any]:
    """The first non-blank lines, parsed (or _BAD)."""
    out: list[Any] = []
    with path.open("rb") as fh:
        for raw in _raw_lines(fh):
            text = None if raw is None else _decode(raw)
            if text is None or text.strip():
                out.append(_BAD if text is None else _parse(text))
            if len(out) >= limit or fh.tell() > MAX_HEAD_BYTES:
                break
    return out


def _array_head(text: str, limit: int) -> list[Any]:
    """The first items of a JSON array document, parsed from its (possibly cut) beginning."""
    decoder, items, pos = json.JSONDecoder(), [], text.index("[") + 1
    while len(items) < limit:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        items.append(item)
    return items


def _start(path: Path, size: int) -> str:
    with path.open("rb") as fh:
        return fh.read(size).decode("utf-8", errors="replace").lstrip("\ufeff").lstrip()


def _head(path: Path, limit: int) -> tuple[str, list[Any]]:
    """("json-array" | "jsonl", the first records parsed)."""
    if _start(path, 4096).startswith("["):
        return "json-array", _array_head(_start(path, MAX_LINE_BYTES), limit)
    return "jsonl", _jsonl_head(path, limit)


def looks_like_dataset(path: str | Path) -> bool:
    """A cheap sniff: do the first records match a dataset format (supported or not), rather than a transcript?"""
    try:
        records = [r for r in _head(Path(path), SNIFF_RECORDS)[1] if isinstance(r, dict)]
    except OSError:
        return False
    if not records or any(transcript_kind(r) for r in records):
        return False
    return any(spec_for(r) or unsupported_shape(r) for r in records)


# --- refusals ---------------------------------------------------------------------------------------------------

def _is_binary(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(BINARY_SNIFF_BYTES)
    undecodable = len(head) - len(head.decode("utf-8", errors="ignore").encode("utf-8"))
    return b"\x00" in head or undecodable > MAX_UNDECODABLE * len(head)


def _file_refusal(path: Path, max_bytes: int) -> str | None:
    """Why the file is refused before its records are read, or None."""
    if not path.is_file():
        return f"{path} is not a file. Choose a .jsonl (or .json) dataset file."
    size = path.stat().st_size
    if size == 0:
        return f"{path.name} is empty: there are no records to train on. Choose a file with one record per line."
    if size > max_bytes:
        return (f"{path.name} is {size / 1024**3:.1f} GiB, over the {max_bytes / 1024**3:.1f} GiB limit. "
                "Split it into smaller files and add them one by one.")
    if _is_binary(path):
        return (f"{path.name} is a binary file, not UTF-8 JSON text. Choose a .jsonl file with one JSON record "
                "per line, saved as UTF-8.")
    return None


def _keys_seen(records: list[dict]) -> str:
    counts = Counter(k for r in records for k in r)
    return ", ".join(f"`{k}`" for k, _ in counts.most_common(8)) or "none"


def _transcript_reason(path: Path, kind: str) -> str:
    return (f"{path.name} is a {kind} session transcript, not a dataset. Add it as an agent transcript "
            "instead; dataset files hold training records.")


def _unknown_reason(path: Path, records: list[Any]) -> str:
    dicts = [r for r in records if isinstance(r, dict)]
    if kind := next((k for r in dicts if (k := transcript_kind(r))), None):
        return _transcript_reason(path, kind)
    if not dicts:
        return (f"{path.name} holds JSON values that are not objects (the first is a {_type(records[0])}). "
                f"Each record must be a JSON object in one of the accepted formats: {accepted_formats()}.")
    shape = next((s for r in dicts if (s := unsupported_shape(r))), None)
    what = f"look like {shape}, which Nightschool cannot train on" if shape else "match no known dataset format"
    return (f"{path.name} was refused: its records {what} (keys seen: {_keys_seen(dicts)}). "
            f"Accepted formats: {accepted_formats()}. Convert the file to one of them and add it again.")


def _unparsed_reason(path: Path) -> str:
    doc = _parse(_start(path, MAX_DOCUMENT_BYTES)) if path.stat().st_size <= MAX_DOCUMENT_BYTES else _BAD
    if kind := transcript_kind(doc):
        return _transcript_reason(path, kind)
    if isinstance(doc, dict):
        return (f"{path.name} is one JSON document, not JSON Lines. Put one record per line (e.g. "
                "`jq -c . file.json > file.jsonl`), or drop a JSON array of records.")
    return (f"{path.name} is not JSON Lines: its first lines are not valid JSON. Choose a .jsonl file with one JSON "
            "record per line, or a .json array of records.")


def _vote(path: Path, head: list[Any]) -> tuple[DatasetSpec | None, str]:
    """The spec most of the first records belong to, or None and why the file is refused."""
    parsed = [r for r in head if r is not _BAD]
    if not parsed:
        return None, (_unparsed_reason(path) if head else
                      f"{path.name} is empty: it has no records. Choose a file with one record per line.")
    votes = Counter(s.name if (s := spec_for(r)) else None for r in parsed)
    best = max(SPECS, key=lambda name: votes[name])
    if not votes[best] or votes[None] > votes[best]:
        return None, _unknown_reason(path, parsed)
    return SPECS[best], ""


# --- checking a whole file --------------------------------------------------------------------------------------

def _take(check: DatasetCheck, spec: DatasetSpec, number: int, raw: bytes | None) -> None:
    if raw is None:
        check.problems.append((number, f"line is over the {MAX_LINE_BYTES // 1024**2} MiB limit"))
        return
    text = _decode(raw)
    if not text.strip():
        check.blank += 1
        return
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as exc:
        check.problems.append((number, f"not valid JSON ({exc.msg} at column {exc.colno})"))
        return
    _judge_record(check, spec, number, rec)


def _judge_record(check: DatasetCheck, spec: DatasetSpec, number: int, rec: Any) -> None:
    if problem := record_problem(spec, rec):
        check.problems.append((number, problem))
    else:
        check.records += 1


def _scan_jsonl(check: DatasetCheck, spec: DatasetSpec) -> None:
    digest = hashlib.sha256()
    with check.path.open("rb") as fh:
        for number, raw in enumerate(_raw_lines(fh, digest), start=1):
            check.lines = number
            _take(check, spec, number, raw)
    check.sha256 = digest.hexdigest()


def _verdict(check: DatasetCheck, spec: DatasetSpec) -> DatasetCheck:
    bad, name, unit = len(check.problems), check.path.name, "record" if check.layout == "json-array" else "line"
    shown = "; ".join(f"{unit} {n}: {why}" for n, why in check.problems[:SHOWN_PROBLEMS])
    fix = f"Fix the file (each record should look like {spec.example}) and add it again."
    if not check.records:
        return _refuse(check, f"{name} has no usable {spec.name} record ({check.summary()}). {shown}. {fix}")
    if bad > check.records:
        return _refuse(check, f"{name} was refused: {bad} of {bad + check.records} records fail the {spec.name} "
                              f"checks ({shown}). {fix}")
    check.accepted = True
    return check


def _refuse(check: DatasetCheck, reason: str) -> DatasetCheck:
    check.accepted, check.reason = False, reason
    return check


def _check_array(check: DatasetCheck) -> DatasetCheck:
    check.layout, size = "json-array", check.path.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        return _refuse(check, f"{check.path.name} is one {size / 1024**2:.0f} MiB JSON document, too big to load "
                              "at once. Convert it to JSON Lines (`jq -c '.[]' file.json > file.jsonl`).")
    items = _parse(_start(check.path, size))
    if not isinstance(items, list):
        return _refuse(check, f"{check.path.name} is not a valid JSON array. Fix it, or convert it to JSON Lines "
                              "with one record per line.")
    spec, reason = _vote(check.path, items[:VOTE_RECORDS])
    if spec is None:
        return _refuse(check, reason)
    check.spec, check.lines, check.sha256 = spec.name, len(items), sha256_file(check.path)
    for number, rec in enumerate(items, start=1):
        _judge_record(check, spec, number, rec)
    return _verdict(check, spec)


def check_dataset(path: str | Path, max_bytes: int = MAX_BYTES) -> DatasetCheck:
    """Detect a dropped file's format by majority over its first records, then quick-check every record."""
    check = DatasetCheck(Path(path))
    try:
        if reason := _file_refusal(check.path, max_bytes):
            return _refuse(check, reason)
        layout, head = _head(check.path, VOTE_RECORDS)
        if layout == "json-array":
            return _check_array(check)
        spec, reason = _vote(check.path, head)
        if spec is None:
            return _refuse(check, reason)
        check.spec = spec.name
        _scan_jsonl(check, spec)
    except OSError as exc:
        return _refuse(check, f"{check.path.name} could not be read ({exc.strerror or exc}). Check the file "
                              "exists and is readable, then add it again.")
    return _verdict(check, spec)

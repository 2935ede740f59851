"""Reading JSONL transcripts robustly: byte offsets, CRLF, invalid UTF-8, a half-written last line, bad JSON."""
from __future__ import annotations

import json

import orjson
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_LINE_BYTES = 64 * 1024**2  # a single record larger than this is set aside, not parsed


@dataclass
class Record:
    line: int  # 1-based line number in the file
    offset: int  # byte offset where the line starts
    data: Any  # the parsed JSON value (any type: callers check)


@dataclass
class ReadResult:
    records: list[Record] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, reason)
    blank: int = 0
    end_offset: int = 0  # where the next read should start: after the last complete line
    lines: int = 0  # complete lines consumed


def read_jsonl(path: str | Path, start_offset: int = 0, first_line: int = 1, final: bool = False) -> ReadResult:
    """Parse every complete line from start_offset; a last line without its newline is left for later.

    final: the file is finished (a one-shot import, or unchanged for a while), so a last line without a
    newline is taken too.
    """
    out = ReadResult(end_offset=start_offset)
    with Path(path).open("rb") as fh:
        fh.seek(start_offset)
        offset, number = start_offset, first_line
        for raw in fh:
            if not raw.endswith(b"\n") and not final:
                break  # being written: it waits for its newline
            _parse_line(out, raw, number, offset)
            offset += len(raw)
            number += 1
            out.lines += 1
        out.end_offset = offset
    return out


def _parse_line(out: ReadResult, raw: bytes, number: int, offset: int) -> None:
    body = raw.rstrip(b"\r\n")
    if offset == 0 and body.startswith(b"\xef\xbb\xbf"):
        body = body[3:]  # a UTF-8 byte-order mark is not part of the first record
    if not body.strip():
        out.blank += 1
        return
    if len(body) > MAX_LINE_BYTES:
        out.problems.append((number, f"line is {len(body)} bytes, over the {MAX_LINE_BYTES}-byte limit"))
        return
    try:
        out.records.append(Record(number, offset, orjson.loads(body)))  # ~3x json.loads; strict UTF-8
        return
    except orjson.JSONDecodeError:
        pass  # invalid UTF-8, NaN, huge integers...: the standard parser decides, with its precise message
    text = body.decode("utf-8", errors="replace")  # invalid UTF-8 becomes U+FFFD, the record is kept
    try:
        out.records.append(Record(number, offset, json.loads(text)))
    except (json.JSONDecodeError, RecursionError) as exc:
        why = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        out.problems.append((number, f"not valid JSON ({why})"))


"""The one JSONL line reader and its limits: bounded reads (an over-long line is skipped unread), byte offsets, CRLF,
a BOM, invalid UTF-8, a half-written last line, bad JSON; records streamed one at a time (stream_jsonl, with progress)
or held (read_jsonl). Transcripts, training files and dropped files all use it."""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import orjson

MAX_FILE_BYTES = 2 * 1024**3  # a bigger file is refused unread
MAX_LINE_BYTES = 64 * 1024**2  # a longer line is set aside with its size, never read into memory whole
MAX_HEAD_BYTES = 32 * 1024**2  # format detection reads no further than this
BINARY_SNIFF_BYTES = 8192  # a NUL byte in this much of the start: a binary file
PROGRESS_BYTES = 4 * 1024**2  # a stream reports its progress this often
BAD = object()  # a line that is not valid JSON on its own (or too long to parse)


Reading = Callable[[Path, int, int], None]  # (file, bytes read, its size): a big file's progress
Typed = Callable[[bytes], Any]  # a line's typed decoding (a msgspec Decoder's decode); ValueError: orjson reads it


@dataclass
class Line:
    """One line as read: its bytes (None when over MAX_LINE_BYTES: skipped unread), size and whether it ended."""

    data: bytes | None
    size: int  # bytes consumed, newline included
    complete: bool  # ended with a newline (a last line without one may still be being written)


def raw_lines(fh: IO[bytes], digest: Any = None) -> Iterator[Line]:
    """Every line of a binary file from its position; feeds `digest` everything read."""
    limit = MAX_LINE_BYTES
    while raw := fh.readline(limit + 1):
        if digest is not None:
            digest.update(raw)
        ended = raw[-1] == 10  # a newline
        if ended or len(raw) <= limit:
            yield Line(raw, len(raw), ended)
            continue
        size, complete = len(raw), False
        while rest := fh.readline(1 << 20):
            _feed(digest, rest)
            size += len(rest)
            if rest.endswith(b"\n"):
                complete = True
                break
        yield Line(None, size, complete)


def _feed(digest: Any, data: bytes) -> None:
    if digest is not None:
        digest.update(data)


def too_long(size: int) -> str:
    """The reason given for a line over the limit."""
    return f"line is {size} bytes, over the {MAX_LINE_BYTES // 1024**2} MiB limit"


def decode(raw: bytes) -> str:
    """A line's text: invalid UTF-8 becomes U+FFFD, a BOM and the line ending are dropped."""
    return raw.decode("utf-8", errors="replace").lstrip("\ufeff").rstrip("\r\n")


def loads(text: str) -> Any:
    """The parsed value (json.loads'), or BAD. msgspec reads it first (~4x json.loads, the same values: integers of
    any size included); what it refuses (NaN, a lone surrogate, bad JSON) is json.loads' to take or refuse."""
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return BAD


def json_problem(exc: Exception) -> str:
    """Why a line is not JSON, in words."""
    why = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
    return f"not valid JSON ({why})"


def head(path: str | Path, count: int) -> list[Any]:
    """The first `count` non-blank lines, parsed (or BAD), reading no further than MAX_HEAD_BYTES."""
    return list(first_records(path, count))


def first_records(path: str | Path, count: int) -> Iterator[Any]:
    """head()'s records one at a time: each line read and parsed only when asked for (the file opens on the first)."""
    with Path(path).open("rb") as fh:
        given = 0
        for line in raw_lines(fh):
            text = None if line.data is None else decode(line.data)
            if text is None or text.strip():
                given += 1
                yield BAD if text is None else loads(text)
            if given >= count or fh.tell() > MAX_HEAD_BYTES:
                break


# --- transcripts: read on from a byte offset as the agent appends ---------------------------------------------------

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


def read_jsonl(path: str | Path, start_offset: int = 0, first_line: int = 1, final: bool = False,
               progress: Reading | None = None, typed: Typed | None = None) -> ReadResult:
    """Parse every complete line from start_offset; a last line without its newline is left for later.

    final: the file is finished (a one-shot import, or unchanged for a while), so a last line without a
    newline is taken too. Every record is held in the result: stream_jsonl reads one at a time. typed: see
    JsonlStream.
    """
    stream = stream_jsonl(path, start_offset, first_line, final, progress, typed=typed)
    records = list(stream)
    return ReadResult(records, stream.problems, stream.blank, stream.end_offset, stream.lines)


def stream_jsonl(path: str | Path, start_offset: int = 0, first_line: int = 1, final: bool = False,
                 progress: Reading | None = None, until: int | None = None,
                 typed: Typed | None = None) -> JsonlStream:
    """read_jsonl's records one at a time (none held: a file of any size reads in the memory of one line);
    `until`: stop at that byte offset (a second pass reads what the first one did)."""
    return JsonlStream(Path(path), start_offset, first_line, final, progress, until, typed)


@dataclass
class JsonlStream:
    """Iterate once for the records; after it, problems, blank, lines and end_offset are read_jsonl's. `typed`: each
    line is first decoded by it (a msgspec Decoder of a parser's record type: only the fields the parser reads, ~1.5x
    orjson building every value); a line it refuses (a ValueError: a field of another type, not an object, invalid
    UTF-8 in a field read) is read as without it, into plain values."""

    path: Path
    start_offset: int = 0
    first_line: int = 1
    final: bool = False
    progress: Reading | None = None  # (file, bytes read, its size) every PROGRESS_BYTES and at the end
    until: int | None = None
    typed: Typed | None = None
    problems: list[tuple[int, str]] = field(default_factory=list)
    blank: int = 0
    lines: int = 0
    end_offset: int = 0

    def __iter__(self) -> Iterator[Record]:
        self.end_offset = self.start_offset
        with self.path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(self.start_offset)
            offset, number, report = self.start_offset, self.first_line, self.start_offset + PROGRESS_BYTES
            for line in raw_lines(fh):
                if (not line.complete and not self.final) or (self.until is not None and offset >= self.until):
                    break  # being written: it waits for its newline
                record = _parse_line(self, line, number, offset, self.typed)
                offset += line.size
                number += 1
                self.lines, self.end_offset = self.lines + 1, offset
                if record is not None:
                    yield record
                if self.progress and offset >= report:
                    self.progress(self.path, offset, size)
                    report = offset + PROGRESS_BYTES
        if self.progress:
            self.progress(self.path, self.end_offset, max(size, self.end_offset))


def _parse_line(out: ReadResult | JsonlStream, line: Line, number: int, offset: int,
                typed: Typed | None = None) -> Record | None:
    """The line's record, or None (a problem or a blank line, counted in `out`)."""
    data = line.data  # its line ending stays on for the fast readers (JSON's whitespace): no copy of the line
    if data is None:
        out.problems.append((number, too_long(line.size)))
        return None
    if offset == 0 and data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark is not part of the first record
    if not data or data.isspace():  # nothing but ASCII whitespace (a line ending included)
        out.blank += 1
        return None
    if typed is not None:
        try:
            return Record(number, offset, typed(data))
        except ValueError:  # msgspec's DecodeError and ValidationError, a UnicodeDecodeError: not of the type
            pass
    try:
        return Record(number, offset, orjson.loads(data))  # ~3x json.loads; strict UTF-8
    except orjson.JSONDecodeError:
        pass  # invalid UTF-8, NaN, huge integers...: the standard parser decides, with its precise message
    body = data.rstrip(b"\r\n")
    text = body.decode("utf-8", errors="replace")  # invalid UTF-8 becomes U+FFFD, the record is kept
    try:
        return Record(number, offset, json.loads(text))
    except (json.JSONDecodeError, RecursionError) as exc:
        out.problems.append((number, json_problem(exc)))
        return None


def line_excerpts(path: Path, wanted: set[int], limit: int) -> dict[int, str]:
    """The raw text of some lines by number (1-based), each cut to `limit` bytes: quarantine excerpts; {} when the
    file cannot be read."""
    out: dict[int, str] = {}
    try:
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, 1):
                if number in wanted:
                    out[number] = raw[:limit].decode("utf-8", errors="replace").rstrip("\r\n")
                    if len(out) == len(wanted):
                        break
    except OSError:
        pass
    return out

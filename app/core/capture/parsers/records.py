"""Transcript lines as typed msgspec Structs that hold only the fields the parsers read (and lines that do not fit).

Decoding a line straight into these (`claude_line`, `codex_line`: base/lines' `typed`) skips every field no parser
reads (a Claude Code line's toolUseResult, progress data and file snapshots, a Codex rollout's instructions and
encrypted reasoning) and builds no dict for the rest: ~1.5x orjson's plain values. Fields a parser reads as any
JSON value are typed Any, so only a line whose nesting differs (a Claude message or content block that is not an
object, a Codex payload that is not one) falls back to plain values, which `claude_record` / `codex_record` turn
into the same Structs with the values the parser would have read from the dicts (a non-object where an object is
read is None). A Claude Code field the parser reads only as a string is typed `Text` (a string or null): a line with
another value there falls back too, and holds None, so the parser reads such a field without checking its type. A
field the parser looks up inside only once in a while (toolUseResult.agentId, an image's media type) stays
msgspec.Raw, read by `look`. A Codex field whose absence differs from null defaults to msgspec.UNSET."""
from __future__ import annotations

import json
from typing import Any, Union

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

NONE = Raw()  # a Raw field the line does not have


Text = Union[str, None]  # noqa: UP007 - a field the parser reads only as a string: another value is None to it


class ClaudeBlock(Struct):
    """A content block: text, thinking, tool_use, tool_result (its content: a string or blocks), image."""

    type: Any = None
    text: Text = None
    thinking: Text = None
    name: Text = None
    input: Any = None
    id: Text = None
    tool_use_id: Text = None
    content: Union[str, list[ClaudeBlock], None] = None  # noqa: UP007 - msgspec reads the annotation
    is_error: Any = None
    source: Raw = NONE  # an image's {media_type, data}: only its media type is read


class ClaudeMessage(Struct):
    content: Union[str, list[ClaudeBlock], None] = None  # noqa: UP007
    id: Text = None
    model: Text = None
    usage: Any = None


class ClaudeRecord(Struct):
    """One line of a Claude Code session file."""

    type: Any = None
    uuid: Text = None
    parentUuid: Text = None  # noqa: N815 - the JSON's names
    logicalParentUuid: Text = None  # noqa: N815
    timestamp: Text = None
    isSidechain: Any = None  # noqa: N815
    agentId: Text = None  # noqa: N815
    sessionId: Text = None  # noqa: N815
    cwd: Text = None
    gitBranch: Text = None  # noqa: N815
    version: Text = None
    subtype: Any = None
    isMeta: Any = None  # noqa: N815
    isCompactSummary: Any = None  # noqa: N815
    parentToolUseID: Text = None  # noqa: N815
    message: Union[ClaudeMessage, None] = None  # noqa: UP007 - not an object: None, as the parser reads it
    toolUseResult: Raw = NONE  # noqa: N815 - only its agentId is read, and only on a tool result's line
    data: Raw = NONE  # a progress record's: only its agentId is read


class CodexItem(Struct):
    """One line of a Codex rollout ({timestamp, type, payload}), its payload, or an older rollout's bare item: the
    same fields, as the parser reads an older line's item from the line itself."""

    type: Any = None
    timestamp: Any = UNSET
    payload: Union[CodexItem, None, UnsetType] = UNSET  # noqa: UP007 - present but not an object: None
    record_type: Any = UNSET
    id: Any = UNSET
    message: Any = UNSET  # an event's text: `message`, else `text`, when there is no `message` at all
    text: Any = None
    cwd: Any = None
    cli_version: Any = None
    git: Any = None
    model: Any = None
    role: Any = None
    content: Any = None
    summary: Any = None
    call_id: Any = None
    name: Any = None
    arguments: Any = None
    input: Any = None
    action: Any = None
    output: Any = None
    info: Any = None
    reason: Any = None


class _Look(Struct):
    agentId: Any = None  # noqa: N815
    media_type: Any = None


_CLAUDE = msgspec.json.Decoder(ClaudeRecord)
_CODEX = msgspec.json.Decoder(CodexItem)
_LOOK = msgspec.json.Decoder(_Look)
claude_line = _CLAUDE.decode
codex_line = _CODEX.decode
_RECORD_FIELDS = frozenset(ClaudeRecord.__struct_fields__) - {"message", "toolUseResult", "data"}
_BLOCK_FIELDS = frozenset(ClaudeBlock.__struct_fields__) - {"content", "source"}
_TEXTS = {kind: frozenset(name for name, field in kind.__annotations__.items() if field == "Text")
          for kind in (ClaudeRecord, ClaudeBlock, ClaudeMessage)}  # the fields typed Text, by Struct
_CODEX_FIELDS = frozenset(CodexItem.__struct_fields__) - {"payload"}


def look(value: Any, name: str) -> Any:
    """`value.get(name)` where value is an object (a Raw field decoded now, or a plain value), else None."""
    if isinstance(value, Raw):
        if not value:
            return None
        try:
            value = _LOOK.decode(value)
        except msgspec.ValidationError:
            return None  # not an object
        except ValueError:  # invalid UTF-8 in it: read as the plain reader would
            value = json.loads(bytes(value).decode("utf-8", errors="replace"))
        else:
            return getattr(value, name)
    return value.get(name) if isinstance(value, dict) else None


def claude_record(data: dict) -> ClaudeRecord:
    """A Claude Code line's plain values as the typed record the parser reads."""
    rec = ClaudeRecord(**_texts(ClaudeRecord, {k: v for k, v in data.items() if k in _RECORD_FIELDS}))
    message = data.get("message")
    if isinstance(message, dict):
        rec.message = ClaudeMessage(_content(message.get("content")), **_texts(ClaudeMessage, {
            "id": message.get("id"), "model": message.get("model")}), usage=message.get("usage"))
    rec.toolUseResult, rec.data = data.get("toolUseResult"), data.get("data")
    return rec


def _texts(kind: type, values: dict[str, Any]) -> dict[str, Any]:
    """Plain values as the typed `kind` holds them: a `Text` field that is no string is None."""
    texts = _TEXTS[kind]
    return {k: None if k in texts and not isinstance(v, str) else v for k, v in values.items()}


def _content(value: Any) -> str | list[ClaudeBlock] | None:
    if isinstance(value, str):
        return value
    return [_block(b) for b in value] if isinstance(value, list) else None


def _block(value: Any) -> ClaudeBlock:
    """A block's plain values as a ClaudeBlock (one that is not an object: a block without a type)."""
    if not isinstance(value, dict):
        return ClaudeBlock()
    block = ClaudeBlock(**_texts(ClaudeBlock, {k: v for k, v in value.items() if k in _BLOCK_FIELDS}))
    block.content, block.source = _content(value.get("content")), value.get("source")
    return block


def codex_record(data: dict) -> CodexItem:
    """A Codex line's (or payload's) plain values as the typed item the parser reads."""
    item = CodexItem(**{k: v for k, v in data.items() if k in _CODEX_FIELDS})
    if "payload" in data:
        payload = data["payload"]
        item.payload = codex_record(payload) if isinstance(payload, dict) else None
    return item


def given(value: Any) -> Any:
    """A field that may be UNSET, as dict.get reads it: None when the line does not have it."""
    return None if value is UNSET else value

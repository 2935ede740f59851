"""The normalised session model every transcript format is read into: session -> turns -> messages -> parts."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

MODELS_SEP = ","  # sessions.models: the acting models joined, in the order they first acted
Role = Literal["user", "assistant", "tool", "system"]
PartKind = Literal["text", "thinking", "tool_call", "tool_result", "image"]


@dataclass
class Part:
    """One block of a message: text, thinking, a tool call (name + input) or a tool result (output + is_error)."""

    kind: PartKind
    text: str = ""  # text, thinking, tool output, or an image's media type
    tool_name: str | None = None
    tool_input: Any = None
    call_id: str | None = None  # links a tool_result to its tool_call
    is_error: bool = False

    @property
    def chars(self) -> int:
        """The text's length."""
        return len(self.text)


@dataclass
class Message:
    role: Role
    parts: list[Part] = field(default_factory=list)
    id: str | None = None  # the source's id (Claude uuid / message id, Gemini record id, ...)
    parent_id: str | None = None
    timestamp: str | None = None  # ISO 8601 as written by the agent
    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)  # input_tokens, output_tokens, cache_*...
    compact_summary: bool = False  # a compaction summary: not the user's words
    meta: bool = False  # injected by the harness (isMeta, environment context...)
    line: int | None = None  # 1-based line in the source file of its first record

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.parts if p.kind == "text")

    def tool_calls(self) -> list[Part]:
        return [p for p in self.parts if p.kind == "tool_call"]


def is_request(msg: Message) -> bool:
    """A genuine user request: the user's own words (not tool results, summaries or meta lines)."""
    return msg.role == "user" and not msg.compact_summary and not msg.meta and bool(msg.text.strip())


def acting_model(msg: Message) -> str | None:
    """The model an assistant message names as it is stored in sessions.models; None for a placeholder in angle
    brackets (Claude Code's `<synthetic>` replies)."""
    if msg.role == "assistant" and msg.model and not msg.model.startswith("<"):
        return msg.model.replace(MODELS_SEP, " ")
    return None


@dataclass
class Turn:
    """A user request and everything the agent did until the next user request."""

    request: Message | None
    replies: list[Message] = field(default_factory=list)


@dataclass
class Session:
    agent: str  # its row's name in capture/agents.AGENTS
    session_id: str
    source_path: str
    cwd: str | None = None
    project: str | None = None
    git_branch: str | None = None
    agent_version: str | None = None
    model: str | None = None
    actor: str = "teacher"  # who acted: teacher | student | mixed (capture/actors.mark, from the messages' models)
    started_at: str | None = None
    ended_at: str | None = None
    messages: list[Message] = field(default_factory=list)  # the branch that reached the end, in order
    abandoned: list[list[Message]] = field(default_factory=list)  # rewind branches, kept apart
    subagents: list[Session] = field(default_factory=list)
    spawned_by: str | None = None  # for a sub-agent: the call_id of the tool call that started it
    compactions: int = 0
    skipped: Counter = field(default_factory=Counter)  # unknown / ignored record types -> count
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, reason) for unusable lines
    lines: int = 0  # lines read (for balancing counts)
    used: int = 0  # records that went into the session (messages, compactions)
    blank: int = 0  # empty lines; lines == used + line-level skipped + problems + blank
    end_offset: int = 0  # bytes of the source file read (after the last complete line)

    def turns(self) -> list[Turn]:
        """Split the main branch at genuine user requests (not tool results, summaries or meta lines)."""
        turns: list[Turn] = []
        for msg in self.messages:
            genuine = is_request(msg)
            if genuine or not turns:
                turns.append(Turn(request=msg if genuine else None))
                if genuine:
                    continue
            turns[-1].replies.append(msg)
        return turns

    def acting_models(self) -> list[str]:
        """The models its assistant messages name (every branch), in the order they first acted; a placeholder in
        angle brackets (Claude Code's `<synthetic>` replies) names none."""
        seen: dict[str, None] = {}
        for branch in (self.messages, *self.abandoned):
            for m in branch:
                model = acting_model(m)
                if model:
                    seen.setdefault(model, None)
        return list(seen)

    def tool_sequence(self) -> list[str]:
        return [p.tool_name or "?" for m in self.messages for p in m.tool_calls()]

    def usage(self) -> dict[str, int]:
        total: Counter = Counter()
        for m in self.messages:
            total.update(m.usage)
        return dict(total)

"""Behavioural signals of a session (what the behavioural reward scores): tool sequence, reasoning, constraints, pruning,
self-corrections, exploration depth, errors and recoveries, and an outcome guess."""
from __future__ import annotations

import codecs
import re
from collections import Counter
from dataclasses import dataclass, field

import re2

from app.core.capture.session import Message, Session

# Each word pattern starts with a look at the next character (the first letters of its words, as caseless as the
# words): the same matches, ~2.5x faster, as the regex engine no longer tries every word at every word boundary.
REASONING = re.compile(r"(?im)^\s*(?:first|then|next|finally|after that|step \d+)\b[,:]?")
CONSTRAINT = re.compile(r"(?i)\b(?=[mnhs])(?:must|need to|have to|should)\b[^.\n]{0,60}"
                        r"\b(?:before|first|after|never|always)\b")
PRUNING = re.compile(r"(?i)\b(?=[sniwd])(?:skip(?:ping)?|no need to|not needed|won't|don't need to|ignore)\b"
                     r"[^.\n]{0,80}\b(?:because|since|as)\b")
SELF_CORRECTION = re.compile(r"(?i)\b(?=[awoilmc])(?:actually|wait|on second thought|i was wrong|"
                             r"let me (?:re|try again|fix)|my mistake|correction)\b")
# The counts are taken by RE2 (google-re2: ~6x faster than `re` on these texts) with the same patterns less their
# looks ahead (RE2 has none; they only skip positions, tests/core/capture/test_signals.py). RE2's \b, \w, \s and \d are
# ASCII and `re`'s are Unicode, so the text is made ASCII first, each character standing for what it is to these
# patterns (`_ascii`): the counts are `re`'s on every text.
FOLDS = {"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}  # (?i) matches them to ASCII letters in `re`
WORD_SPACE = bytes.maketrans(b"\x0b\x1c\x1d\x1e\x1f", b"     ")  # ASCII that `re` takes for \s and RE2 does not
_FAST = [re2.compile(re.sub(r"\(\?=\[[a-z]+\]\)", "", p.pattern))
         for p in (REASONING, CONSTRAINT, PRUNING, SELF_CORRECTION)]
READ_TOOLS = {"read", "grep", "glob", "ls", "find", "search", "read_file", "list_directory", "search_file_content",
              "view", "cat"}
MINIMAL, THOROUGH = 2, 8  # reads before the first edit: <= MINIMAL minimal, >= THOROUGH thorough
TEXT_CHARS = 4 * 1024**2  # assistant text counted at a time


@dataclass
class Signals:
    tool_sequence: list[str] = field(default_factory=list)
    tool_counts: dict[str, int] = field(default_factory=dict)
    reasoning_markers: int = 0
    constraints: int = 0
    pruning: int = 0
    self_corrections: int = 0
    exploration: str = "minimal"  # minimal | moderate | thorough
    reads_before_first_edit: int = 0
    errors: int = 0
    recoveries: int = 0  # errors followed by a successful call of the same tool
    outcome: str = "finished"  # finished | abandoned | errored

    def as_dict(self) -> dict:
        """asdict's, without its deep copy's cost (a session row's signals_json): the list and dict are copied, what
        they hold are strings and integers."""
        out = dict(self.__dict__)  # the fields, in their order (__init__ sets them so)
        out["tool_sequence"], out["tool_counts"] = list(self.tool_sequence), dict(self.tool_counts)
        return out


def _assistant_text(messages: list[Message]) -> str:
    return "\n".join(p.text for m in messages if m.role == "assistant" for p in m.parts
                     if p.kind in ("text", "thinking"))


def _stand_in(char: str) -> str:
    """An ASCII character that is to the patterns what a non-ASCII one is to `re`'s: the letter (?i) takes it for,
    a digit, a word character that is no letter of theirs, a space, or punctuation."""
    if char in FOLDS:
        return FOLDS[char]
    if char.isdecimal():
        return "0"
    return "_" if char.isalnum() else " " if char.isspace() else "#"


_STAND_INS: dict[str, str] = {}  # by character, and by a short run of them (a dash, a quote, an accented letter...)
RUNS, RUN_CHARS = 50_000, 8  # runs kept: at most so many, each so long


def _replace(error: UnicodeEncodeError) -> tuple[str, int]:
    run = error.object[error.start:error.end]
    ascii_ = _STAND_INS.get(run)
    if ascii_ is None:
        out = []
        for char in run:
            one = _STAND_INS.get(char)
            if one is None:
                one = _STAND_INS[char] = _stand_in(char)
            out.append(one)
        ascii_ = "".join(out)
        if len(run) <= RUN_CHARS and len(_STAND_INS) < RUNS:
            _STAND_INS[run] = ascii_
    return ascii_, error.end


codecs.register_error("nightschool-signals", _replace)


def _ascii(text: str) -> bytes:
    """The text as ASCII bytes, one byte per character, on which RE2 counts what `re` counts on the text."""
    return text.encode("ascii", errors="nightschool-signals").translate(WORD_SPACE)


def counts(text: str) -> tuple[int, int, int, int]:
    """Reasoning markers, constraints, pruning and self-corrections in a text (`re`'s findall counts)."""
    data = _ascii(text)
    return tuple(sum(1 for _ in rx.finditer(data)) for rx in _FAST)  # type: ignore[return-value]


def _is_read(name: str) -> bool:
    low = name.lower()
    return low in READ_TOOLS or low.startswith(("read", "grep", "glob", "search", "list"))


def _is_edit(name: str) -> bool:
    low = name.lower()
    return any(k in low for k in ("edit", "write", "replace", "patch", "apply", "create"))


class Tally:
    """signals() taken one message at a time (a huge session's messages are read back from its spill one by one):
    the assistant text is counted a few MB at a time, joined as _assistant_text joins it (no match spans a join)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.order: list[str] = []
        self.errored: set[str] = set()
        self.texts: list[str] = []
        self.chars, self.found = 0, [0, 0, 0, 0]
        self.last: Message | None = None  # the last message that is not a harness's (meta)

    def add(self, msg: Message) -> None:
        if not msg.meta:
            self.last = msg
        assistant = msg.role == "assistant"
        for part in msg.parts:
            kind = part.kind
            if kind == "tool_call":
                key = part.call_id or f"#{len(self.order)}"
                self.names[key] = part.tool_name or "?"
                self.order.append(key)
            elif kind == "tool_result":
                if part.call_id and part.is_error:
                    self.errored.add(part.call_id)
            elif assistant and (kind == "text" or kind == "thinking"):
                self.texts.append(part.text)
                self.chars += len(part.text)
                if self.chars >= TEXT_CHARS:
                    self._count()

    @property
    def calls(self) -> int:
        """The tool calls of the messages added."""
        return len(self.order)

    def _count(self) -> None:
        for k, n in enumerate(counts("\n".join(self.texts))):
            self.found[k] += n
        self.texts, self.chars = [], 0

    def signals(self) -> Signals:
        """Those of the messages added, in order: (tool name, errored?) for every call, a call with no result
        counting as not errored."""
        self._count()
        calls = [(self.names[k], k in self.errored) for k in self.order]
        sequence = [name for name, _ in calls]
        first_edit = next((i for i, n in enumerate(sequence) if _is_edit(n)), len(sequence))
        reads = sum(1 for n in sequence[:first_edit] if _is_read(n))
        reasoning, constraints, pruning, corrections = self.found
        return Signals(
            tool_sequence=sequence, tool_counts=dict(Counter(sequence)),
            reasoning_markers=reasoning, constraints=constraints, pruning=pruning, self_corrections=corrections,
            exploration="minimal" if reads <= MINIMAL else "thorough" if reads >= THOROUGH else "moderate",
            reads_before_first_edit=reads, errors=sum(1 for _, failed in calls if failed),
            recoveries=_recoveries(calls), outcome=_outcome(self.last, calls),
        )


def _recoveries(calls: list[tuple[str, bool]]) -> int:
    count, pending = 0, set()
    for name, failed in calls:
        if failed:
            pending.add(name)
        elif name in pending:
            pending.discard(name)
            count += 1
    return count


def _outcome(last: Message | None, calls: list[tuple[str, bool]]) -> str:
    if last is None:
        return "abandoned"
    if calls and calls[-1][1] and last.role == "tool":
        return "errored"
    if last.role == "assistant" and last.text.strip() and not last.tool_calls():
        return "finished"
    return "abandoned"  # ended on a request, a pending call or an unanswered result


def signals(session: Session) -> Signals:
    """Compute the signals of the branch that reached the end (abandoned branches are not counted)."""
    tally = Tally()
    for msg in session.messages:
        tally.add(msg)
    return tally.signals()

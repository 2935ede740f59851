"""The five behavioural reward components: each (completion, RewardContext) -> a float in [0, 1]."""
from __future__ import annotations

import re
from collections import Counter

from app.core.judge.reward_context import RewardContext
from app.core.toolcalls.actions import call_path, is_exploratory, name_words
from app.core.toolcalls.agreement import call_keys
from app.core.toolcalls.convention import blocks, parse_student, strip_calls
from app.core.toolcalls.schemas import well_formed

REASONING_SATURATION = 4.0  # reasoning steps for full depth (a marked sentence is a step, a plain one half a step);
# reasoning_fit: a difference from the teacher's steps is measured against at least this many
MIN_STEP_WORDS = 3  # shorter sentences ("First.", "Then:") are no step
NEUTRAL_SELF_CORRECTION = 1.0  # no error to recover from: nothing to correct, full marks, whatever the text says
DUPLICATE_PENALTY = 0.25  # per identical repeat of a tool call within the completion
EDIT_WORDS = {"edit", "replace", "patch", "multiedit"}  # change an existing file: it must have been looked at first

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_FABRICATED = re.compile(r"<tool_response>|<tool_result>|<\|im_start\|>|<\|(?:user|assistant|tool)\|>")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_BULLET = re.compile(r"^\s*(?:[-*•>]+|\d+[.)])\s*")
_WORD = re.compile(r"[a-z0-9_']+")
_TERM = re.compile(r"[a-z_][\w./-]{3,}")
_MARKER = re.compile(r"\b(?:first|then|next|finally|after that|because|since|so|therefore|thus|hence|must|need to|"
                     r"needs to|should|before|after|skip|skipping|instead|rather than|no need|unless|otherwise|if|"
                     r"which means|means)\b", re.I)
_CORRECTION = re.compile(r"\b(?:actually|wait|oops|my mistake|i was wrong|i made a mistake|that failed|it failed|"
                         r"(?:did not|didn't|does not|doesn't) (?:work|exist)|the error|error (?:says|shows|means|is)|"
                         r"failed because|let me (?:fix|correct|retry|try again|try a different)|instead|wrong|typo|"
                         r"not found|missing)\b", re.I)
_GENERIC = {"error", "errors", "such", "file", "files", "directory", "line", "most", "recent", "call", "last",
            "traceback", "exit", "code", "command", "failed", "with", "from", "that", "this", "found", "permission",
            "denied", "tool_use_error", "exception", "fatal", "status", "none", "true", "false", "input", "output"}


def clamp(value: float) -> float:
    return max(0.0, min(1.0, value))


def split_thinking(text: str) -> tuple[str, str]:
    """(thinking, visible): <think> blocks (an unclosed one runs to the end; text before a lone leading </think> is
    thinking too, as when the template opened the block in the prompt) and the rest."""
    thoughts = []
    head, sep, rest = text.partition("</think>")
    if sep and "<think>" not in head:
        thoughts, text = [head], rest
    thoughts += _THINK.findall(text)
    return "\n".join(thoughts), _THINK.sub(" ", text)


def _without_calls(text: str) -> str:
    return _FENCE.sub(" ", strip_calls(text))


def reasoning_text(completion: str) -> str:
    """All the words of a completion that are not tool calls or code: thinking and prose."""
    thinking, visible = split_thinking(completion)
    return _without_calls(thinking + "\n" + visible)


def student_calls(completion: str) -> list[dict]:
    """The well-formed Hermes calls of a completion as [{name, arguments}] (agreement's parser)."""
    return [c["function"] for c in parse_student(completion).get("tool_calls", [])]


def _keys(calls: list[dict]) -> list[tuple]:
    return call_keys({"tool_calls": calls})


# --- constraint adherence -----------------------------------------------------------------------------------------

def call_validity(completion: str, tools: list[str]) -> float:
    """Valid tool-call blocks / all blocks (an unclosed or stray tag counts as a block); 1.0 when there is none."""
    bodies, total = blocks(completion)
    return sum(well_formed(b, set(tools)) for b in bodies) / total if total else 1.0


def unread_edits(calls: list[dict], ctx: RewardContext) -> int:
    """Edits of a file that neither the context nor this completion touched before ("look before you change"); an
    edit of a file the teacher edits too is let pass (its read may lie before the context's window)."""
    seen = set(ctx.seen_paths) | {p for c in ctx.teacher_calls if (p := call_path(c))}
    count = 0
    for call in calls:
        path = call_path(call)
        if path and path not in seen and EDIT_WORDS & set(name_words(call["name"])):
            count += 1
        if path:
            seen.add(path)
    return count


def structure_penalty(completion: str, ctx: RewardContext) -> float:
    """0.25 an unclosed <think>; 0.5 invented tool results or chat turns; 0.25 text after the last tool call (a turn
    ends with its calls: what follows pretends to know their results); 0.25 per edit of an unread file."""
    penalty = 0.25 if completion.count("<think>") > completion.count("</think>") else 0.0
    penalty += 0.5 if _FABRICATED.search(completion) else 0.0
    end = completion.rfind("</tool_call>")
    penalty += 0.25 if end >= 0 and _without_calls(completion[end + len("</tool_call>"):]).strip() else 0.0
    return penalty + 0.25 * unread_edits(student_calls(completion), ctx)


def constraint_adherence(completion: str, ctx: RewardContext) -> float:
    """1.0: every tool call well-formed (JSON object, non-empty name, object arguments), of a tool in `ctx.tools`
    (when known), the turn well-formed and files read before edited. 0.0: empty, or nothing valid. Between:
    valid/all blocks minus structure_penalty."""
    if not completion.strip():
        return 0.0
    return clamp(call_validity(completion, ctx.tools) - structure_penalty(completion, ctx))


# --- tool efficiency ----------------------------------------------------------------------------------------------

def tool_efficiency(completion: str, ctx: RewardContext) -> float:
    """Teacher called tools: 0.7 × name Jaccard + 0.3 × exact calls (name and normalised arguments, multiset) /
    max(#student, #teacher), minus DUPLICATE_PENALTY per identical repeat; no call at all → 0. Teacher answered in
    text: a visible text answer 1.0, thinking only 0.5, any tool call or nothing 0.0."""
    calls = student_calls(completion)
    if not ctx.teacher_calls:
        if calls:
            return 0.0
        thinking, visible = split_thinking(completion)
        return 1.0 if _without_calls(visible).strip() else 0.5 if thinking.strip() else 0.0
    if not calls:
        return 0.0
    mine, theirs = {c["name"] for c in calls}, {c["name"] for c in ctx.teacher_calls}
    jaccard = len(mine & theirs) / len(mine | theirs)
    a, b = _keys(calls), _keys(ctx.teacher_calls)
    exact = sum((Counter(a) & Counter(b)).values()) / max(len(a), len(b))
    return clamp(0.7 * jaccard + 0.3 * exact - DUPLICATE_PENALTY * (len(a) - len(set(a))))


# --- reasoning depth ----------------------------------------------------------------------------------------------

def reasoning_steps(completion: str) -> float:
    """Distinct sentences (bag of words, so a repeat adds nothing) of at least MIN_STEP_WORDS words: 1 with a
    reasoning marker (first/then/because/must/before/skipping/instead …), 0.5 without."""
    seen: set[frozenset] = set()
    depth = 0.0
    for sentence in _SENTENCE.split(reasoning_text(completion)):
        sentence = _BULLET.sub("", sentence).strip()
        words = _WORD.findall(sentence.lower())
        key = frozenset(words)
        if len(words) < MIN_STEP_WORDS or key in seen:
            continue
        seen.add(key)
        depth += 1.0 if _MARKER.search(sentence) else 0.5
    return depth


def reasoning_depth(completion: str, ctx: RewardContext) -> float:
    """0.0: no reasoning (or only tool calls); 1.0: REASONING_SATURATION steps or more; linear between. Not in the
    reward: it ranks a ramble above the teacher's own actions (bench/README.md, the reward on the teacher's actions)."""
    return min(1.0, reasoning_steps(completion) / REASONING_SATURATION)


def reasoning_fit(completion: str, ctx: RewardContext) -> float:
    """1 − |a − b| / max(a, b, REASONING_SATURATION), a and b the reasoning steps of the completion and of the
    teacher's action at this step (its thinking and prose, `ctx.teacher_text`): as much reasoning as the teacher gave
    there — a line where it wrote a line, a plan where it planned; a ramble before a plain action, or silence before
    a considered one, scores low."""
    a, b = reasoning_steps(completion), reasoning_steps(ctx.teacher_text)
    return 1.0 - abs(a - b) / max(a, b, REASONING_SATURATION)


# --- self-correction ----------------------------------------------------------------------------------------------

def _error_terms(error_text: str) -> set[str]:
    return {t.strip("./-") for t in _TERM.findall(error_text.lower())} - _GENERIC - {""}


def self_correction(completion: str, ctx: RewardContext) -> float:
    """No error before this step: NEUTRAL_SELF_CORRECTION (constant, so "Actually…" spam earns nothing). After an
    error: 0.0 if it repeats the failing call unchanged; else 0.35 acknowledging it ("actually", "the error", "let me
    fix" …) + 0.25 naming something specific from the error (a file, an exception) + 0.4 a (different) tool call, or
    0.2 a text-only answer."""
    if not ctx.after_error:
        return NEUTRAL_SELF_CORRECTION
    calls = student_calls(completion)
    if ctx.failed_call and _keys([ctx.failed_call])[0] in set(_keys(calls)):
        return 0.0
    text = reasoning_text(completion)
    words = {t.strip("./-") for t in _TERM.findall(text.lower())}
    score = 0.35 if _CORRECTION.search(text) else 0.0
    score += 0.25 if _error_terms(ctx.error_text) & words else 0.0
    return score + (0.4 if calls else 0.2 if text.strip() else 0.0)


# --- exploration fit ----------------------------------------------------------------------------------------------

def exploration_fit(completion: str, ctx: RewardContext) -> float:
    """1 − |a − b| / max(a, b, 1), a and b the exploratory calls (rewards_context.is_exploratory) of the completion
    and of the teacher's step: 1.0 the same amount, 0.0 e.g. reading when the teacher acted at once."""
    a = sum(is_exploratory(c) for c in student_calls(completion))
    b = ctx.teacher_exploration or 0
    return 1.0 - abs(a - b) / max(a, b, 1)

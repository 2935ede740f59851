"""What the Experience tab says: pure functions of the controller's snapshot, the key's place and a run's result."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.base.words import grouped
from app.core.experience import config
from app.ui.kit import local_time

REASON_WORDS = {"invalid_tool_call": "invalid tool call", "rambled": "ran to the token limit",
                "empty": "empty answer", "client": "marked bad by the client",
                "contradicted": "contradicted by a teacher session", "tool_failed": "its tool call failed"}
NOTHING_DUE = "no flagged answer is due (each has a correction or waits out its cooldown)"
STATE_WORDS = {"recorded": "fine", "flagged": "waits for a correction", "corrected": "corrected"}


@dataclass
class Snapshot:
    """What the tab shows, read in one go."""

    buffer: config.BufferConfig
    teacher: config.TeacherConfig
    counts: dict[str, Any]
    flagged: list[dict] = field(default_factory=list)  # newest first: entries with a reason (flagged or corrected)
    waiting: list[dict] = field(default_factory=list)  # corrections waiting for review, with "entry" (request)
    usage: dict | None = None  # today's tokens, the daily budget, blocked_until


def tokens(n: Any) -> str:
    """12400 → '12,400' (the app's one way: base.words.grouped)."""
    return grouped(n, none="–")


def buffer_headline(snap: Snapshot | None) -> str:
    if snap is None:
        return "Reading the experience buffer…"
    total = snap.counts.get("total", 0)
    flagged = sum(v for k, v in snap.counts.get("by_state", {}).items() if k != "recorded")
    kept = f"{tokens(total)} answer{'s' if total != 1 else ''} kept, {tokens(flagged)} needed improvement"
    if snap.buffer.enabled:
        return f"The experience buffer is on — {kept}."
    return "The experience buffer is off — nothing is recorded." + (f" ({kept}.)" if total else "")


def buffer_sentence(cfg: config.BufferConfig) -> str:
    return (f"Records each request to the built-in server and the student's answer, scrubbed like captured sessions, "
            f"kept at most {tokens(cfg.max_rows)} entries / {cfg.max_age_days:g} days; the API key is never stored. "
            f"Answers that need improvement are re-done by the teacher and train the next cycle.")


def reasons_line(counts: dict) -> str:
    by = counts.get("by_reason", {})
    return "Needs improvement: " + " · ".join(f"{by.get(k, 0)} {words}" for k, words in REASON_WORDS.items())


def reasons_words(reasons: list[dict]) -> str:
    return ", ".join(REASON_WORDS.get(r.get("kind"), r.get("kind", "?")) for r in reasons) or "–"


def state_words(entry: dict, reviewing: bool = False) -> str:
    if entry["state"] == "corrected" and reviewing:
        return "correction waits for review"
    words = STATE_WORDS.get(entry["state"], entry["state"])
    if entry["state"] == "flagged" and entry.get("last_error"):
        again = local_time(entry.get("next_try_at"), "%H:%M")
        words = f"teacher failed ({entry['last_error']})" + (f", tries again {again}" if again else "")
    return words


def entry_row(entry: dict, reviewing: set[str] = frozenset()) -> list[str]:
    """Time, client, why, state (reviewing: the entries whose correction waits for review)."""
    return [local_time(entry.get("created_at"), "%d %b %H:%M"), entry.get("client") or "–",
            reasons_words(entry.get("reasons") or []), state_words(entry, entry["id"] in reviewing)]


def flagged_empty(snap: Snapshot | None) -> str:
    if snap is None:
        return "Reading…"
    total = snap.counts.get("total", 0)
    if not total:
        return ("No answers recorded yet — send requests to the built-in server." if snap.buffer.enabled else
                "No answers recorded yet — turn the buffer on and send requests to the built-in server.")
    return f"None of the {tokens(total)} recorded answers needs improvement."


def waiting_empty(snap: Snapshot | None) -> str:
    if snap is None:
        return ""
    if snap.buffer.require_review:
        return "No correction waits for your review."
    return ("No correction waits for review: corrections that pass validation train without it. Tick \"Review "
            "corrections before they train\" to check each one first.")


def correction_row(c: dict) -> list[str]:
    """#, answer, from, score."""
    who = c.get("teacher_model") or c.get("source") or "?"
    client = ((c.get("entry") or {}).get("client")) or ""
    return [str(c["id"]), f"{c['experience_id'][:12]}" + (f" ({client})" if client else ""),
            f"{c.get('source')}: {who}" if c.get("source") != who else who, f"{c.get('score', 0):.2f}"]


def message_text(message: dict | None) -> str:
    """A chat message as text: its content, then each tool call as name(arguments)."""
    message = message or {}
    calls = [c.get("function", c) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    parts = [str(message.get("content") or "")] + [f"{f.get('name')}({f.get('arguments')})" for f in calls]
    return "\n".join(p for p in parts if p) or "(empty)"


def correction_preview(c: dict | None) -> str:
    """The question, the student's answer and the correction, for the person reviewing it."""
    if c is None:
        return "Select a correction to see the question, the student's answer and the correction."
    entry = c.get("entry") or {}
    asked = [m for m in (entry.get("request") or {}).get("messages") or [] if m.get("role") == "user"]
    who = c.get("teacher_model") or c.get("source")
    why = "; ".join(r["text"] for r in entry.get("reasons") or [])  # each reason is already a sentence
    return (f"Asked: {message_text(asked[-1]) if asked else '(no user message)'}\n\n"
            f"Student: {message_text(entry.get('answer'))}\n"
            + (f"  — {why}\n" if why else "")
            + f"\nCorrection from {who} (score {c.get('score', 0):.2f}):\n{message_text(c.get('answer'))}")


def budget_line(usage: dict | None, cfg: config.TeacherConfig | None = None) -> str:
    """'12 400 of 200 000 tokens today'."""
    if usage is None:
        return f"0 of {tokens(cfg.tokens_per_day)} tokens today" if cfg else "–"
    line = f"{tokens(usage.get('tokens_today'))} of {tokens(usage.get('tokens_per_day'))} tokens today"
    if usage.get("blocked_until"):
        line += f"; the teacher asked to wait until {local_time(str(usage['blocked_until']), '%H:%M')}"
    return line


def teacher_hint(cfg: config.TeacherConfig, place: str) -> str:
    missing = [what for what, ok in (("its URL", cfg.url), ("its model", cfg.model), ("its key", place not in
                                                                                      ("", "none"))) if not ok]
    if not missing:
        return ""
    return (f"Set {', '.join(missing[:-1]) + ' and ' if len(missing) > 1 else ''}{missing[-1]} to let the teacher "
            "correct answers: any OpenAI-compatible chat API, hosted or local.")


def key_words(place: str) -> str:
    if place in ("", "none"):
        return "No key set."
    if place == "keyring":
        return "Kept in the OS keyring."
    if place.startswith("file:"):
        return f"Kept in {place[5:]} (readable by you only)."
    if place.startswith("env:"):
        return f"Read from ${place[4:]}."
    return place[:1].upper() + place[1:] + "."


def run_words(run: dict) -> str:
    """What a `Correct now` did, in a sentence or two."""
    why = run.get("stopped_because") or ""
    if not run.get("tried"):
        return f"Nothing corrected: {why or NOTHING_DUE}."
    return (f"Tried {run['tried']}: {run['accepted']} accepted, {run['waiting']} waiting for review, "
            f"{run['rejected']} rejected, {run['failed']} failed; {tokens(run['tokens_used'])} tokens used."
            + (f" Stopped: {why}." if why else ""))

"""Experience controller: the Experience tab's model side. It reads the buffer (counts, flagged answers, corrections
waiting for review), the teacher's settings and today's budget off the GUI thread every few seconds, and runs the
person's commands (buffer on/off, settings, the key, accept / reject, "Correct now") on worker threads; the words the
tab shows are pure functions of what was read."""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QTimer, Signal

from app.core.base.errors import Explained
from app.core.base.store import Store
from app.core.base.words import grouped
from app.core.experience import buffer as B, config as C, corrections as K, keys, teacher as T
from app.ui.background import PolledController
from app.ui.kit import local_time

REFRESH_MS = 3000
SHOWN = 200  # flagged answers read for the table
PREVIEWED = 50  # waiting corrections read with their request (for the preview)
REASON_WORDS = {"invalid_tool_call": "invalid tool call", "rambled": "ran to the token limit",
                "empty": "empty answer", "client": "marked bad by the client",
                "contradicted": "contradicted by a teacher session"}
NOTHING_DUE = "no flagged answer is due (each has a correction or waits out its cooldown)"
STATE_WORDS = {"recorded": "fine", "flagged": "waits for a correction", "corrected": "corrected"}


@dataclass
class Snapshot:
    """What the tab shows, read in one go."""

    buffer: C.BufferConfig
    teacher: C.TeacherConfig
    counts: dict[str, Any]
    flagged: list[dict] = field(default_factory=list)  # newest first: entries with a reason (flagged or corrected)
    waiting: list[dict] = field(default_factory=list)  # corrections waiting for review, with "entry" (request)
    usage: dict | None = None  # today's tokens, the daily budget, blocked_until


def read_snapshot(store: Store) -> Snapshot:
    """The store's view for the tab (on a worker thread: it reads the database, never the network)."""
    flagged = B.entries(store, state="flagged", limit=SHOWN) + B.entries(store, state="corrected", limit=SHOWN)
    flagged.sort(key=lambda e: e["created_at"] or "", reverse=True)
    waiting = K.waiting(store)
    for c in waiting[:PREVIEWED]:
        try:
            c["entry"] = B.get(store, c["experience_id"])
        except Explained:  # deleted meanwhile
            c["entry"] = None
    cfg = C.teacher(store)
    return Snapshot(C.buffer(store), cfg, B.counts(store), flagged[:SHOWN], waiting, _usage(store, cfg))


def _usage(store: Store, cfg: C.TeacherConfig) -> dict:
    """Today's budget from the store alone (teacher.usage() also asks the keyring: not every few seconds)."""
    blocked = T.blocked_until(store)
    return {"tokens_today": T.tokens_today(store), "tokens_per_day": cfg.tokens_per_day,
            "blocked_until": blocked.isoformat() if blocked else None}


def key_place() -> str:
    """Where the teacher's key is kept (never the key); read on a worker thread: a keyring may be slow."""
    try:
        return keys.where()
    except keys.TeacherKeyError as exc:
        return f"unusable: {exc.message}"


# --- words -----------------------------------------------------------------------------------------------------------
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


def buffer_sentence(cfg: C.BufferConfig) -> str:
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


def budget_line(usage: dict | None, cfg: C.TeacherConfig | None = None) -> str:
    """'12 400 of 200 000 tokens today'."""
    if usage is None:
        return f"0 of {tokens(cfg.tokens_per_day)} tokens today" if cfg else "–"
    line = f"{tokens(usage.get('tokens_today'))} of {tokens(usage.get('tokens_per_day'))} tokens today"
    if usage.get("blocked_until"):
        line += f"; the teacher asked to wait until {local_time(str(usage['blocked_until']), '%H:%M')}"
    return line


def teacher_hint(cfg: C.TeacherConfig, place: str) -> str:
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


# --- the controller --------------------------------------------------------------------------------------------------
class ExperienceController(PolledController):
    """`changed` after every read; `ran` with the words of a finished "Correct now"; `correcting_changed` while the
    teacher works. Commands run one at a time in order (settings are read, changed and written whole)."""

    READS, THREAD = "The experience buffer", "experience-read"
    changed = Signal()
    ran = Signal(str)
    correcting_changed = Signal(bool)

    def __init__(self, store: Store, refresh_ms: int = REFRESH_MS) -> None:
        super().__init__()
        self.store = store
        self.snapshot: Snapshot | None = None
        self.key_place = ""  # read once, then after each change (a keyring can ask to be unlocked: not polled)
        self.correcting = False
        self.last_run = ""
        self._want_key = False
        self._commands = ThreadPoolExecutor(max_workers=1, thread_name_prefix="experience-cmd")
        self._timer = QTimer(self)
        self._timer.setInterval(refresh_ms)
        self._timer.timeout.connect(self.refresh)

    # --- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._timer.start()
        self.refresh(with_key=True)

    def stop(self) -> None:
        self._closed = True
        self._timer.stop()
        self._commands.shutdown(wait=False, cancel_futures=True)

    # --- reading ---------------------------------------------------------------------------------------------------
    def refresh(self, with_key: bool = False) -> None:
        self._want_key = self._want_key or with_key or not self.key_place
        super().refresh()

    def _reader(self):
        with_key, self._want_key = self._want_key, False
        return lambda: (read_snapshot(self.store), key_place() if with_key else None)

    def _apply(self, result) -> None:
        self.snapshot, place = result
        self.key_place = place if place is not None else self.key_place

    # --- commands --------------------------------------------------------------------------------------------------
    def set_enabled(self, on: bool) -> None:
        words = ("The experience buffer is on: the built-in server records what it answers (scrubbed, bounded)."
                 if on else "The experience buffer is off: nothing new is recorded.")
        self._command(lambda: C.set_buffer(self.store, "enabled", on), words, "Not changed")

    def set_buffer(self, key: str, value: Any) -> None:
        if self.snapshot is not None and getattr(self.snapshot.buffer, key, None) == value:
            return
        self._command(lambda: C.set_buffer(self.store, key, value), f"Buffer setting {key} is now {value}.",
                      "Not changed")

    def set_teacher(self, key: str, value: Any) -> None:
        if self.snapshot is not None and getattr(self.snapshot.teacher, key, None) == value:
            return
        self._command(lambda: C.set_teacher(self.store, key, value), f"Teacher {key} is now {value}.", "Not changed")

    def set_key(self, key: str) -> None:
        """Keep the teacher's key through keys.set_key (the key is never shown, logged or put in the store)."""
        self._command(lambda: keys.set_key(key), lambda place: f"The teacher's key is set. {key_words(place)}", "Key not set",
                      key_changed=True)

    def decide(self, correction_id: int, accept: bool) -> None:
        words = (f"Correction {correction_id} accepted: it trains in the next cycle." if accept
                 else f"Correction {correction_id} rejected: it never trains.")
        self._command(lambda: K.decide(self.store, correction_id, accept, by="user",
                                       reason="" if accept else "rejected in the window"),
                      words, "Not accepted" if accept else "Not rejected")

    def _command(self, call: Callable, said: str | Callable[[Any], str], failed: str, key_changed: bool = False
                 ) -> None:
        """call() on the command thread (in order); then its words in the banner and a fresh read."""
        self._set_busy(True)

        def body() -> None:
            try:
                result = call()
                text = said(result) if callable(said) else said
                self._post(self._done, ("info", text, key_changed))
            except Explained as exc:
                self._post(self._done, ("error", f"{failed} — {exc}", key_changed))
            except Exception as exc:  # noqa: BLE001 - shown to the user, the app goes on
                self._post(self._done, ("error", f"{failed} — unexpected {type(exc).__name__}: {exc}", key_changed))

        try:
            self._commands.submit(body)
        except RuntimeError:  # stopped
            self._set_busy(False)

    def _done(self, level: str, text: str, key_changed: bool) -> None:
        self._set_busy(False)
        self.message.emit(level, text)
        self.refresh(with_key=key_changed)

    def correct_now(self) -> None:
        """The teacher re-answers flagged entries on a worker thread (network: never on the GUI thread)."""
        if self.correcting:
            return
        self.correcting = True
        self.correcting_changed.emit(True)

        def body() -> None:
            try:
                text = run_words(dataclasses.asdict(T.correct(self.store, by="window")))
                level = "info"
            except Explained as exc:
                level, text = "error", f"Nothing corrected — {exc}"
            except Exception as exc:  # noqa: BLE001 - shown to the user, the app goes on
                level, text = "error", f"Nothing corrected — unexpected {type(exc).__name__}: {exc}"
            self._post(self._corrected, (level, text))

        threading.Thread(target=body, name="experience-correct", daemon=True).start()

    def _corrected(self, level: str, text: str) -> None:
        self.correcting = False
        self.last_run = text
        self.correcting_changed.emit(False)
        self.ran.emit(text)
        if level == "error":
            self.message.emit(level, text)
        self.refresh()

    # --- reading the state (the panel) -----------------------------------------------------------------------------
    def waiting_correction(self, correction_id: int | None) -> dict | None:
        if self.snapshot is None or correction_id is None:
            return None
        return next((c for c in self.snapshot.waiting if c["id"] == correction_id), None)

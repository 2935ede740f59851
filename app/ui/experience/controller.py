"""Experience controller: the Experience tab's model side. It reads the buffer (counts, flagged answers, corrections
waiting for review), the teacher's settings and today's budget off the GUI thread every few seconds, and runs the
person's commands (buffer on/off, settings, the key, accept / reject, "Correct now") on worker threads; the words the
tab shows are app/ui/experience/words.py."""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from PySide6.QtCore import Signal

from app.core.base.errors import Explained
from app.core.base.store import Store
from app.core.experience import buffer, config, corrections, keys, teacher
from app.ui.background import PolledController
from app.ui.experience.words import Snapshot, key_words, run_words

REFRESH_MS = 3000
SHOWN = 200  # flagged answers read for the table
PREVIEWED = 50  # waiting corrections read with their request (for the preview)


def read_snapshot(store: Store) -> Snapshot:
    """The store's view for the tab (on a worker thread: it reads the database, never the network)."""
    flagged = buffer.entries(store, state="flagged", limit=SHOWN) + buffer.entries(store, state="corrected", limit=SHOWN)
    flagged.sort(key=lambda e: e["created_at"] or "", reverse=True)
    waiting = corrections.waiting(store)
    for c in waiting[:PREVIEWED]:
        try:
            c["entry"] = buffer.get(store, c["experience_id"])
        except Explained:  # deleted meanwhile
            c["entry"] = None
    cfg = config.teacher(store)
    return Snapshot(config.buffer(store), cfg, buffer.counts(store), flagged[:SHOWN], waiting, _usage(store, cfg))


def _usage(store: Store, cfg: config.TeacherConfig) -> dict:
    """Today's budget from the store alone (teacher.usage() also asks the keyring: not every few seconds)."""
    blocked = teacher.blocked_until(store)
    return {"tokens_today": teacher.tokens_today(store), "tokens_per_day": cfg.tokens_per_day,
            "blocked_until": blocked.isoformat() if blocked else None}


def key_place() -> str:
    """Where the teacher's key is kept (never the key); read on a worker thread: a keyring may be slow."""
    try:
        return keys.where()
    except keys.TeacherKeyError as exc:
        return f"unusable: {exc.message}"


# --- the controller --------------------------------------------------------------------------------------------------
class ExperienceController(PolledController):
    """`changed` after every read; `ran` with the words of a finished "Correct now"; `correcting_changed` while the
    teacher works. Commands run one at a time in order (settings are read, changed and written whole)."""

    READS, THREAD = "The experience buffer", "experience-read"
    changed = Signal()
    ran = Signal(str)
    correcting_changed = Signal(bool)

    def __init__(self, store: Store, refresh_ms: int = REFRESH_MS) -> None:
        super().__init__(refresh_ms)
        self.store = store
        self.snapshot: Snapshot | None = None
        self.key_place = ""  # read once, then after each change (a keyring can ask to be unlocked: not polled)
        self.correcting = False
        self.last_run = ""
        self._want_key = False
        self._commands = ThreadPoolExecutor(max_workers=1, thread_name_prefix="experience-cmd")

    # --- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._timer.start()
        self.refresh(with_key=True)

    def stop(self) -> None:
        super().stop()
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
        self._command(lambda: config.set_buffer(self.store, "enabled", on), words, "Not changed")

    def set_buffer(self, key: str, value: Any) -> None:
        if self.snapshot is not None and getattr(self.snapshot.buffer, key, None) == value:
            return
        self._command(lambda: config.set_buffer(self.store, key, value), f"Buffer setting {key} is now {value}.",
                      "Not changed")

    def set_teacher(self, key: str, value: Any) -> None:
        if self.snapshot is not None and getattr(self.snapshot.teacher, key, None) == value:
            return
        self._command(lambda: config.set_teacher(self.store, key, value), f"Teacher {key} is now {value}.", "Not changed")

    def set_key(self, key: str) -> None:
        """Keep the teacher's key through keys.set_key (the key is never shown, logged or put in the store)."""
        self._command(lambda: keys.set_key(key), lambda place: f"The teacher's key is set. {key_words(place)}", "Key not set",
                      key_changed=True)

    def decide(self, correction_id: int, accept: bool) -> None:
        words = (f"Correction {correction_id} accepted: it trains in the next cycle." if accept
                 else f"Correction {correction_id} rejected: it never trains.")
        self._command(lambda: corrections.decide(self.store, correction_id, accept, by="user",
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
                text = run_words(dataclasses.asdict(teacher.correct(self.store, by="window")))
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

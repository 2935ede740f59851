"""Worker-thread plumbing the tabs' controllers share: a call runs off the GUI thread, its result (or its refusal as
a sentence) comes back on the GUI thread, and nothing comes back once the window has closed; `StorePoll` says when
anyone (another process too) stored what a tab shows."""
from __future__ import annotations

import threading
from typing import Callable

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.core.base.errors import Explained
from app.core.base.store import Store

STORE_POLL_MS = 1000  # how often a tab asks the store whether anyone stored what it shows


class BackgroundController(QObject):
    """Base of a tab's controller: `busy`, `message`, and `_background` to run one step at a time."""

    busy_changed = Signal(bool)
    message = Signal(str, str)  # level (info | error), text
    _back = Signal(object, object)  # (handler, args) from a worker thread, run on the GUI thread

    def __init__(self) -> None:
        super().__init__()
        self.busy = False
        self._closed = False
        self._back.connect(self._dispatch)

    @Slot(object, object)  # a declared slot: the receiver PySide 6.8+ wants for signals emitted on other threads
    def _dispatch(self, handler: Callable, args: tuple) -> None:
        handler(*args)

    def _background(self, name: str, call: Callable, done: Callable, failed: str) -> None:
        """call() on a thread, then `_finish(done, result)` here; a refusal becomes `failed — why` for `_failed`."""
        self._on_thread(name, call, *self._handlers(done, failed))

    def _handlers(self, done: Callable, failed: str) -> tuple[Callable, Callable[[Exception], None]]:
        """The GUI-thread ends of a step: `_finish(done, result)`, or `failed — why` for `_failed`."""
        def refused(exc: Exception) -> None:
            why = exc if isinstance(exc, Explained) else f"unexpected {type(exc).__name__}: {exc}"
            self._finish(self._failed, f"{failed} — {why}")

        return (lambda result: self._finish(done, result)), refused

    def _on_thread(self, name: str, call: Callable, done: Callable, refused: Callable[[Exception], None]) -> None:
        """call() on a thread; done(result) or refused(the exception) on the GUI thread (not once closed)."""
        threading.Thread(target=self._run_and_post, args=(call, done, refused), name=name, daemon=True).start()

    def _run_and_post(self, call: Callable, done: Callable, refused: Callable[[Exception], None]) -> None:
        """On a worker thread: call(), then its outcome posted to the GUI thread (posts arrive in the order made)."""
        try:
            handler, args = done, (call(),)
        except Exception as exc:  # noqa: BLE001 - an Explained or not, the caller shows it; the app goes on
            handler, args = refused, (exc,)
        self._post(handler, args)

    def _post(self, handler: Callable, args: tuple) -> None:
        if self._closed:
            return
        try:
            self._back.emit(handler, args)
        except RuntimeError:  # the window closed meanwhile
            pass

    def _finish(self, handler: Callable, result) -> None:
        self._set_busy(False)
        handler(result)

    def _failed(self, text: str) -> None:
        self.message.emit("error", text)

    def _set_busy(self, busy: bool) -> None:
        if busy != self.busy:
            self.busy = busy
            self.busy_changed.emit(busy)


class PolledController(BackgroundController):
    """A controller that re-reads its state on a thread: one read at a time (a request meanwhile reads once more after
    it), a failed read said once in the banner (the next read tries again), `reads` counting the good ones. Subclasses
    give `_reader` (on the GUI thread: the call to run on the worker) and `_apply` (its result, on the GUI thread),
    and a `changed` signal. `start()` reads now and every `refresh_ms`; `stop()` ends the reads."""

    READS = "The state"  # what could not be read, in the banner's words
    THREAD = "read"

    def __init__(self, refresh_ms: int) -> None:
        super().__init__()
        self.reads = 0
        self.read_error = ""
        self._reading = False
        self._again = False
        self._timer = QTimer(self)
        self._timer.setInterval(refresh_ms)
        self._timer.timeout.connect(self.refresh)

    def start(self) -> None:
        self._timer.start()
        self.refresh()

    def stop(self) -> None:
        self._closed = True
        self._timer.stop()

    def _reader(self) -> Callable[[], object]:
        raise NotImplementedError

    def _apply(self, result) -> None:
        raise NotImplementedError

    def refresh(self) -> None:
        """Read on a thread (one read at a time; a request meanwhile reads again after it)."""
        if self._closed:
            return
        if self._reading:
            self._again = True
            return
        self._reading = True
        read = self._reader()

        def body() -> None:
            try:
                result = read()
            except Exception as exc:  # noqa: BLE001 - said once in the banner; the next read tries again
                result = exc
            self._post(self._on_read, (result,))

        threading.Thread(target=body, name=self.THREAD, daemon=True).start()

    def _on_read(self, result) -> None:
        self._reading = False
        if isinstance(result, Exception):
            why = f"{self.READS} could not be read — {type(result).__name__}: {result}"
            if why != self.read_error:
                self.message.emit("error", why)
            self.read_error = why
        else:
            self.read_error = ""
            self._apply(result)
            self.reads += 1
            self.changed.emit()
        if self._again:
            self._again = False
            self.refresh()


class StorePoll(QTimer):
    """Asks the store every second whether anyone — this window, the CLI, a hook, the daemon — committed what `mark`
    reads (`Store.watch`: SQLite's data_version, then the one-row mark) and emits `changed` when so. `close()` when
    the tab closes."""

    changed = Signal()

    def __init__(self, parent: QObject, store: Store, mark: str, every_ms: int = STORE_POLL_MS) -> None:
        super().__init__(parent)
        self.watch = store.watch(mark)
        self.setInterval(every_ms)
        self.timeout.connect(self._look)
        self.start()

    def _look(self) -> None:
        if self.watch.changed():
            self.changed.emit()

    def close(self) -> None:
        self.stop()
        self.watch.close()

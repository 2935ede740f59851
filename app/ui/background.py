"""Worker-thread plumbing the tabs' controllers share: a call runs off the GUI thread, its result (or its refusal as
a sentence) comes back on the GUI thread, and nothing comes back once the window has closed."""
from __future__ import annotations

import threading
from typing import Callable

from PySide6.QtCore import QObject, Signal

from app.core.base.errors import Explained


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

    def _dispatch(self, handler: Callable, args: tuple) -> None:
        handler(*args)

    def _background(self, name: str, call: Callable, done: Callable, failed: str) -> None:
        """call() on a thread, then `_finish(done, result)` here; a refusal becomes `failed — why` for `_failed`."""
        def body() -> None:
            try:
                result, handler = call(), done
            except Explained as exc:
                result, handler = f"{failed} — {exc}", self._failed
            except Exception as exc:  # noqa: BLE001 - shown to the user, the app goes on
                result, handler = f"{failed} — unexpected {type(exc).__name__}: {exc}", self._failed
            self._post(self._finish, (handler, result))

        threading.Thread(target=body, name=name, daemon=True).start()

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

"""The dismissable message banner every panel shows above its content: error or info, click to hide."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

STYLE = {"error": "background:#5c1f24;color:#ffd7d7;padding:8px;border-radius:4px;",
         "info": "background:#1f3b5c;color:#d7e8ff;padding:8px;border-radius:4px;"}


class Banner(QLabel):
    """Hidden until a message comes; the text can be selected (and copied); a click dismisses it."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setToolTip("Click to dismiss")
        self.hide()

    def show_message(self, level: str, text: str) -> None:
        self.setStyleSheet(STYLE.get(level, STYLE["info"]))
        self.setText(text)
        self.show()

    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self.hide()

"""Token preview: a rendered example, trained tokens highlighted and masked ones dimmed (given data only)."""
from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QFontDatabase, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QLabel, QTextEdit, QVBoxLayout, QWidget

TRAINED_BG, TRAINED_FG = "#1d4d2b", "#c9f5d1"  # the loss falls on these characters
MASKED_FG = "#7d828c"  # context the model reads but is not trained on
NOTE_FG = "#e0b44c"
MAX_CHARS = 200_000  # a longer rendering is cut for display (the counts still cover all of it)


def char_format(trained: bool) -> QTextCharFormat:
    fmt = QTextCharFormat()
    if trained:
        fmt.setBackground(QColor(TRAINED_BG))
        fmt.setForeground(QColor(TRAINED_FG))
    else:
        fmt.setForeground(QColor(MASKED_FG))
    return fmt


def legend_html() -> str:
    return (f"<span style='background:{TRAINED_BG};color:{TRAINED_FG}'>&nbsp;trained&nbsp;</span> "
            "loss on these tokens (the assistant's turns) &nbsp;&nbsp; "
            f"<span style='color:{MASKED_FG}'>masked</span> context only, no loss")


def counts_text(segments: list, tokens: int | None, trained: int | None) -> str:
    chars = sum(len(text) for text, _ in segments)
    trained_chars = sum(len(text) for text, flag in segments if flag)
    share = f"{trained_chars / chars:.0%}" if chars else "0%"
    text = f"{chars:,} characters, {trained_chars:,} in trained segments ({share})"
    if tokens is not None and trained is not None:
        pct = f"{trained / tokens:.0%}" if tokens else "0%"
        text = f"<b>{tokens:,} tokens, {trained:,} trained</b> ({pct}) · " + text
    return text


class TokenPreview(QWidget):
    """`set_segments([[text, 1 if trained else 0], ...], tokens, trained)` shows one rendered example."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.legend = QLabel(legend_html())
        self.legend.setWordWrap(True)
        self.counts = QLabel()
        self.counts.setWordWrap(True)
        self.text = QTextEdit()
        self.text.setReadOnly(True)
        self.text.setUndoRedoEnabled(False)
        self.text.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setStyleHint(QFont.StyleHint.Monospace)
        self.text.setFont(font)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.legend)
        layout.addWidget(self.counts)
        layout.addWidget(self.text, 1)
        self.cut = 0  # characters left out of the display
        self.clear("No example selected.")

    def set_segments(self, segments: list, tokens: int | None = None, trained: int | None = None) -> None:
        self.text.clear()
        cursor = QTextCursor(self.text.document())
        cursor.beginEditBlock()
        room, self.cut = MAX_CHARS, 0
        formats = {True: char_format(True), False: char_format(False)}
        for text, flag in segments:
            shown = text[:max(room, 0)]
            self.cut += len(text) - len(shown)
            room -= len(shown)
            if shown:
                cursor.insertText(shown, formats[bool(flag)])
        if self.cut:
            note = QTextCharFormat()
            note.setForeground(QColor(NOTE_FG))
            note.setFontItalic(True)
            cursor.insertText(f"\n… {self.cut:,} more characters not shown", note)
        cursor.endEditBlock()
        self.text.moveCursor(QTextCursor.MoveOperation.Start)
        self.counts.setText(counts_text(segments, tokens, trained))

    def clear(self, note: str = "") -> None:
        self.text.clear()
        self.text.setPlaceholderText(note)
        self.counts.setText("")
        self.cut = 0

    def plain_text(self) -> str:
        return self.text.toPlainText()

    def html(self) -> str:
        return self.text.toHtml()

"""A row of named stages (a cycle's pipeline): done ones ticked, the current one highlighted — running, waiting for
approval, failed or refused — and the rest dimmed (given data only)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QWidget

PILL = "padding:4px 10px;border-radius:10px;"
LOOKS = {
    "todo": "color:#8a8f98;background:#2b2d33;",
    "done": "color:#b8f5cf;background:#1d3b2a;",
    "running": "color:#ffffff;background:#4f8cff;font-weight:bold;",
    "approval": "color:#2a2000;background:#feca57;font-weight:bold;",
    "failed": "color:#ffffff;background:#c0392b;font-weight:bold;",
    "refused": "color:#2a1a00;background:#ff9f43;font-weight:bold;",
}
MARKS = {"done": "✓ ", "running": "● ", "approval": "? ", "failed": "✗ ", "refused": "✗ "}


class StageRow(QWidget):
    """set_state(current, done, how): `how` is how the current stage shows (running | approval | failed | refused);
    current None shows no stage highlighted (nothing running)."""

    def __init__(self, stages: list[str] | tuple[str, ...], parent=None) -> None:
        super().__init__(parent)
        self._stages = list(stages)
        self._labels: dict[str, QLabel] = {}
        self._looks: dict[str, str] = {}
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        for n, name in enumerate(self._stages):
            if n:
                arrow = QLabel("›")
                arrow.setStyleSheet("color:#6b6f78;")
                layout.addWidget(arrow)
            label = QLabel(name)
            label.setAlignment(Qt.AlignmentFlag.AlignCenter)
            label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
            layout.addWidget(label)
            self._labels[name] = label
        layout.addStretch(1)
        self.set_state(None, [])

    def set_state(self, current: str | None, done, how: str = "running") -> None:
        """done: the names of the stages done (any collection)."""
        for name, label in self._labels.items():
            look = how if name == current else "done" if name in done else "todo"
            if self._looks.get(name) == look:
                continue
            self._looks[name] = look
            label.setText(MARKS.get(look, "") + name)
            label.setStyleSheet(PILL + LOOKS[look])

    # --- reading (tests, the panel) --------------------------------------------------------------------
    def look(self, name: str) -> str:
        """todo | done | running | approval | failed | refused."""
        return self._looks.get(name, "todo")

    def current(self) -> str | None:
        return next((n for n in self._stages if self._looks.get(n) not in ("todo", "done")), None)

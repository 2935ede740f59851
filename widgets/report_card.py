"""A cycle's report card: summary, verdict with its reasons, the held-out metrics of base / previous / candidate with
the candidate's deltas (green where better, red where worse), and examples the candidate gained or lost (given data
only: plain dicts)."""
from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from widgets.compare_table import colour_of, fmt

COLUMNS = ("base", "previous", "candidate", "vs base", "vs previous")
HEADERS = ("Base", "Prev.", "Cand.", "Δ base", "Δ prev.")
TIPS = ("the base model", "the model deployed before this cycle", "this cycle's model",
        "the candidate's change against the base model", "the candidate's change against the previous model")
VERDICT = {"pass": "background:#1d3b2a;color:#b8f5cf;", "fail": "background:#5c1f24;color:#ffd7d7;"}
OTHER_VERDICT = "background:#4a3b1a;color:#ffe7b0;"
BOX = "padding:6px;border-radius:4px;"
CLIP = 400  # characters of an example's prompt / answers shown


def delta_text(value: float | None) -> str:
    return "—" if value is None else f"{value:+.3f}"


class MetricDeltas(QTableWidget):
    """One row per metric: base, previous, candidate, and the candidate's deltas vs base and vs previous."""

    def __init__(self, parent=None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setHorizontalHeaderLabels(list(HEADERS))
        for c, tip in enumerate(TIPS):
            self.horizontalHeaderItem(c).setToolTip(tip)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self._keys: list[str] = []

    def set_data(self, rows: list[tuple[str, str, str]], metrics: dict[str, dict]) -> None:
        """rows: (key, words, "lower" | "higher"); metrics: key -> {base, previous, candidate, vs_base, vs_previous}.
        Rows without any value are left out."""
        shown = [r for r in rows if any((metrics.get(r[0]) or {}).get(c) is not None
                                        for c in ("base", "previous", "candidate"))]
        self._keys = [key for key, _, _ in shown]
        self.setRowCount(len(shown))
        self.setVerticalHeaderLabels([words for _, words, _ in shown])
        for r, (key, words, better) in enumerate(shown):
            m = metrics.get(key) or {}
            self.verticalHeaderItem(r).setToolTip(f"{words}: {better} is better")
            values = [fmt(m.get("base")), fmt(m.get("previous")), fmt(m.get("candidate")),
                      delta_text(m.get("vs_base")), delta_text(m.get("vs_previous"))]
            for c, text in enumerate(values):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if c >= 3:
                    item.setForeground(QBrush(QColor(colour_of(m.get("vs_base" if c == 3 else "vs_previous"),
                                                               better))))
                self.setItem(r, c, item)
        self.resizeRowsToContents()
        rows_height = sum(self.verticalHeader().sectionSizeHint(r) for r in range(self.rowCount()))
        self.setFixedHeight(self.horizontalHeader().sizeHint().height() + rows_height + 2 * self.frameWidth())

    def text(self, key: str, column: str) -> str:
        if key not in self._keys:
            return ""
        return self.item(self._keys.index(key), COLUMNS.index(column)).text()

    def keys(self) -> list[str]:
        return list(self._keys)


def example_html(title: str, items: list[dict], colour: str) -> str:
    if not items:
        return ""
    out = [f"<p style='color:{colour};font-weight:bold;margin:6px 0 2px 0'>{escape(title)}</p>"]
    for item in items:
        prompt = (item.get("prompt") or "")[-CLIP:]
        out.append(
            "<table width='100%' cellspacing='0' cellpadding='3' style='margin-bottom:6px'>"
            f"<tr><td style='color:#9aa0aa'>…{escape(prompt)}</td></tr>"
            f"<tr><td><span style='color:#9aa0aa'>teacher:</span> <code>{escape((item.get('teacher') or '')[:CLIP])}"
            "</code></td></tr>"
            f"<tr><td><span style='color:#9aa0aa'>before ({escape(item.get('outcome_before') or '')}):</span> "
            f"<code>{escape((item.get('before') or '')[:CLIP])}</code></td></tr>"
            f"<tr><td><span style='color:#9aa0aa'>after ({escape(item.get('outcome_after') or '')}):</span> "
            f"<code>{escape((item.get('after') or '')[:CLIP])}</code></td></tr></table>")
    return "".join(out)


class ReportCardView(QWidget):
    """set_card(title, card, rows) shows a card; set_empty(text) says why there is none."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.title = QLabel()
        self.title.setStyleSheet("font-weight:bold;")
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.verdict = QLabel()
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = MetricDeltas()
        self.examples = QTextBrowser()
        self.examples.setOpenLinks(False)
        self.examples.setMinimumHeight(60)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.title, self.summary, self.verdict, self.table):
            layout.addWidget(widget)
        layout.addWidget(self.examples, 1)
        self.filler = QWidget()  # keeps the card at the top while there are no examples
        self.filler.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        layout.addWidget(self.filler, 1)
        self.set_empty("")

    def set_empty(self, text: str) -> None:
        self.title.setText("Last report card")
        self.summary.setText(text)
        self.summary.setStyleSheet("color:#9aa0aa;")
        self.verdict.hide()
        self.table.hide()
        self.examples.hide()
        self.filler.show()

    def set_card(self, title: str, card: dict, rows: list[tuple[str, str, str]], ended: str = "",
                 reason: str = "") -> None:
        """card: the report card dict (summary, metrics, verdict, reasons, gained, lost, times, deployed)."""
        self.title.setText(title)
        self.summary.setStyleSheet("")
        times = card.get("times") or {}
        spent = sum(v for v in times.values() if isinstance(v, (int, float)))
        extra = []
        if card.get("sessions") is not None:
            extra.append(f"{card['sessions']} new sessions")
        if card.get("examples") is not None:
            extra.append(f"{card['examples']} examples")
        if card.get("steps"):
            extra.append(f"{card['steps']} steps")
        if spent:
            extra.append(f"{spent / 60:.0f} min" if spent >= 60 else f"{spent:.0f} s")
        summary = card.get("summary") or ""
        self.summary.setText(summary + (f"\n{' · '.join(extra)}" if extra else ""))
        verdict = card.get("verdict")
        reasons = list(card.get("reasons") or [])
        if verdict or reasons or reason:
            words = {"pass": "Gate: passed", "fail": "Gate: refused"}.get(verdict or "", f"Gate: {verdict}"
                                                                          if verdict else "Ended")
            if card.get("deployed"):
                words += " — deployed"
            if reason and reason not in reasons:
                reasons.insert(0, reason)
            lines = [words] + [f"• {r}" for r in reasons]
            self.verdict.setText("\n".join(lines))
            self.verdict.setStyleSheet(BOX + VERDICT.get(verdict or "", OTHER_VERDICT if verdict
                                                         else VERDICT["fail"] if ended == "failed" else OTHER_VERDICT))
            self.verdict.show()
        else:
            self.verdict.hide()
        metrics = card.get("metrics") or {}
        if metrics:
            self.table.set_data(rows, metrics)
            self.table.setVisible(bool(self.table.keys()))
        else:
            self.table.hide()
        html = (example_html("Gained (agrees with the teacher now)", card.get("gained") or [], "#2ecc71")
                + example_html("Lost (agreed before, not now)", card.get("lost") or [], "#ff6b6b"))
        self.examples.setHtml(html)
        self.examples.setVisible(bool(html))
        self.filler.setVisible(not html)

    # --- reading (tests) ---------------------------------------------------------------------------------
    def text(self) -> str:
        """Everything the card says, as plain text."""
        parts = [self.title.text(), self.summary.text()]
        if not self.verdict.isHidden():
            parts.append(self.verdict.text())
        if not self.examples.isHidden():
            parts.append(self.examples.toPlainText())
        return "\n".join(p for p in parts if p)

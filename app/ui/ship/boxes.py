"""The Ship tab's parts: per-stage export progress bars, the served-model box, and the export and server texts."""
from __future__ import annotations

from html import escape

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QGridLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QProgressBar, QVBoxLayout

from app.core.ship.config import EXPORT_STAGES
from app.ui.kit import DIM_STYLE, arrange, button, heading, label, local_time
from app.ui.ship.controller import Served, ShipController


def seconds(value) -> str:
    if value is None:
        return "…"
    value = max(0, round(value))
    return f"{value // 60} min {value % 60:02d} s" if value >= 60 else f"{value} s"


def size(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def export_html(exp) -> str:
    """The export's files with their smoke results (size, sha256 prefix, load time, speed, the answer)."""
    lines = [f"<b>Export #{exp.row.id}</b> · {escape(exp.row.label)} · {local_time(exp.row.created_at)}"]
    for f in exp.files:
        verdict = ("✓ answers and stops" if f.get("ok") else
                   "not smoke-tested" if f.get("ok") is None else f"✗ {escape(f.get('why', ''))}")
        lines.append(f"<b>{escape(f['quant'])}</b> {escape(f['file'])} · {size(f.get('size'))} · "
                     f"sha256 {escape(str(f.get('sha256', ''))[:12])}…<br>loads in {f.get('load_s', '?')} s · "
                     f"{f.get('tokens_per_s', '?')} tok/s · {verdict}")
        if f.get("answer"):
            lines.append(f"<span style='{DIM_STYLE}'>answer:</span> <i>{escape(f['answer'][:240])}</i>")
    return "<br>".join(lines)


def served_html(served: Served) -> str:
    st = served.state
    if st is None:
        what = (f"Start server serves the current deployment: {escape(served.current.note)}."
                if served.current else "Nothing deployed yet: Deploy a model to serve it.")
        return f"<b style='color:#9aa0aa'>○ Stopped</b><br>{what}"
    cur, standby = st.get("current") or {}, st.get("standby")
    loaded = f", loaded in {cur['load_s']:.2f} s" if isinstance(cur.get("load_s"), (int, float)) else ""
    named = f" — {escape(served.label)}" if served.label else ""
    keep = (f"Previous model kept loaded for instant rollback: <b>{escape(standby.get('name', '?'))}</b>"
            if standby else "No previous model loaded (Roll back loads it first)")
    return (f"<b style='color:#2ecc71'>● Running</b> at <code>{escape(st.get('url', '?'))}</code><br>"
            f"Serving <b>{escape(cur.get('name', '?'))}</b> ({escape(cur.get('quant', '') or '?')}{loaded}){named}"
            f"<br>{keep}")


class StageBars(QGroupBox):
    """One bar per export stage with its ETA; Cancel sets the running step's cancel event."""

    def __init__(self, cancel) -> None:
        super().__init__("Export progress")
        self.what, self.touched, self.bars, self.etas = "", set(), {}, {}
        self.title, self.log = QLabel("Nothing running"), label(style=DIM_STYLE, selectable=True)
        self.title.setMinimumWidth(80)  # a long label is cut rather than widening the pane
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        for row, stage in enumerate(EXPORT_STAGES):
            bar, eta = self.bars[stage], self.etas[stage] = QProgressBar(), QLabel()
            bar.setTextVisible(False)
            bar.setFixedHeight(14)
            eta.setMinimumWidth(130)
            eta.setStyleSheet(DIM_STYLE)
            for col, widget in enumerate((QLabel(stage), bar, eta)):
                grid.addWidget(widget, row, col)
        self.cancel_button = button("Cancel", cancel, "Stop the running export (nothing half-made is kept)")
        arrange(QVBoxLayout(self), arrange(QHBoxLayout(), self.title, 1, self.cancel_button), grid, self.log)
        self._clear("—")
        self.cancel_button.setEnabled(False)

    def _clear(self, text: str) -> None:
        for stage in EXPORT_STAGES:
            self.bars[stage].setRange(0, 1)
            self.bars[stage].setValue(0)
            self.etas[stage].setText(text)

    def reset(self, what: str) -> None:
        self.what, self.touched = what, set()
        self.title.setText(f"<b>{escape(what)}</b>…")
        self.log.clear()
        self._clear("waiting")
        self.cancel_button.setEnabled(True)

    def update_stage(self, phase: str, step: int, total: int, eta, elapsed) -> None:
        if phase not in self.bars:  # e.g. the gate's evaluation while deploying
            self.log.setText(f"{phase} {step} / {total}")
            return
        self.touched.add(phase)
        top = max(total, 1)
        self.bars[phase].setRange(0, top)
        self.bars[phase].setValue(min(step, top))
        self.etas[phase].setText(f"done in {seconds(elapsed)}" if step >= total
                                 else f"{step} / {total} · ETA {seconds(eta)}")

    def finish(self, ok: bool) -> None:
        for stage in EXPORT_STAGES:
            if stage not in self.touched:
                self.etas[stage].setText(("not needed" if self.touched else "reused: already exported") if ok
                                         else "—")
        self.title.setText(f"<b>{escape(self.what)}</b> — {'done' if ok else 'stopped'}")
        self.cancel_button.setEnabled(False)


class ServedBox(QGroupBox):
    """What the built-in server serves, its buttons, the API key and the latest export's smoke results."""

    def __init__(self, controller: ShipController) -> None:
        super().__init__("Served model")
        self.status = label("Reading the server's state…", selectable=True)
        self.start_button = button("Start server", controller.start_server,
                                   "Serve the current deployment (an OpenAI-compatible API on this computer)")
        self.stop_button = button("Stop server", controller.stop_server, "Stop serving (Start server resumes)")
        self.rollback_button = button("Roll back", controller.rollback,
                                      "Serve again what the current deployment replaced")
        self.key = QLineEdit()
        self.key.setReadOnly(True)
        self.key.setToolTip("Send it as 'Authorization: Bearer KEY' to the server's /v1 API")
        self.copy_button = button("Copy", lambda: QGuiApplication.clipboard().setText(self.key.text()),
                                  "Copy the API key to the clipboard")
        self.smoke = label(f"<span style='{DIM_STYLE}'>No export yet.</span>", selectable=True)
        arrange(QVBoxLayout(self), self.status,
                arrange(QHBoxLayout(), self.start_button, self.stop_button, self.rollback_button, 1),
                arrange(QHBoxLayout(), QLabel("API key"), self.key, self.copy_button), heading("Latest export"),
                self.smoke)

    def set_served(self, served: Served) -> None:
        self.status.setText(served_html(served))
        self.key.setText(served.key)

    def update_buttons(self, idle: bool, served: Served | None) -> None:
        running = served is not None and served.state is not None
        current = served.current if served else None
        self.start_button.setEnabled(idle and not running and current is not None)
        self.stop_button.setEnabled(idle and running)
        self.rollback_button.setEnabled(idle and current is not None and current.replaces_id is not None)

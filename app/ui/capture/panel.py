"""Capture panel: sources, totals, per-day and tool charts, projects, recent sessions, transcript viewer, quarantine."""
from __future__ import annotations

import json
import time
from html import escape

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.core.base.words import grouped
from app.core.capture.agents import colours
from app.core.capture.queries import SessionSummary, TranscriptMessage
from app.ui.capture.controller import CaptureController
from app.ui.kit import DIM_STYLE, FAINT, fill, key_at, local_time, make_table, reselect, splitter
from widgets.banner import Banner
from widgets.bars import LabelledBars, StackedBars

ROLE_COLOURS = {"user": "#8ab4ff", "assistant": "#7bd88f", "tool": "#ffb86c", "system": "#c792ea"}
MAX_PART_CHARS = 4000  # a longer text, input or output is cut for display
MAX_TRANSCRIPT_CHARS = 300_000  # the viewer stops rendering after this much text
MAX_DAYS = 90
SOURCES_MS = 5000  # the sources table's relative times are redrawn this often
ALL = "(all projects)"
SESSION_COLUMNS = ["Started", "Agent", "Project", "Title", "Msgs", "Tools", "Errors", "Outcome"]


def _acted(row) -> str:
    """The agent, and who acted where it was not the teacher: "codex (student)", "codex (mixed)"."""
    return row.agent if row.actor == "teacher" else f"{row.agent} ({row.actor})"


def ago(epoch: float | None) -> str:
    if epoch is None:
        return "—"
    s = max(0, int(time.time() - epoch))
    return f"{s} s ago" if s < 60 else f"{s // 60} min ago" if s < 3600 else f"{s // 3600} h ago"


class CapturePanel(QWidget):
    """The view; it re-queries the store when the controller says something changed."""

    def __init__(self, controller: CaptureController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.project: str | None = None
        self.session_id: str | None = None
        self.shown: tuple | None = None  # (session id, messages) the viewer shows
        self._build()
        controller.changed.connect(self.refresh)
        controller.message.connect(self.show_message)
        self._clock = QTimer(self)
        self._clock.timeout.connect(self.refresh_sources)
        self._clock.start(SOURCES_MS)
        self.refresh()

    # --- layout ------------------------------------------------------------------------------
    def _build(self) -> None:
        self.totals = QLabel()
        self.totals.setWordWrap(True)  # the window stays narrow: a long totals line wraps instead of widening it
        self.totals.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.import_button = QPushButton("Import files…")
        self.import_button.clicked.connect(self.choose_files)
        hint = QLabel("or drop transcripts, folders or datasets anywhere on the window")
        hint.setStyleSheet(DIM_STYLE)
        hint.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(self.totals, 1)
        top.addWidget(self.import_button)
        top.addWidget(hint)
        self.banner = Banner()
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.banner)
        layout.addWidget(splitter(Qt.Orientation.Vertical, (self._overview(), self._browser()), [240, 460]), 1)

    def _overview(self) -> QWidget:
        self.per_day = StackedBars("Sessions per day", colours(),
                                   empty="No session captured yet: each day's sessions, by agent, will be drawn here")
        self.tools = LabelledBars("Tool calls", "#4f8cff",
                                  empty="No tool call captured yet: the tools your agents call most will be "
                                        "listed here")
        self.sources = make_table(["Agent", "Root", "State", "Last event", "Error"], 1)
        self.quarantine = make_table(["Source", "Line", "Reason", "Excerpt"], 3)
        self.side_tabs = QTabWidget()
        self.side_tabs.addTab(self.sources, "Sources")
        self.side_tabs.addTab(self.quarantine, "Quarantine")
        return splitter(Qt.Orientation.Horizontal, (self.per_day, self.tools, self.side_tabs), [380, 300, 480])

    def _browser(self) -> QWidget:
        self.projects = make_table(["Project", "Sessions", "Msgs"], 0)
        self.projects.itemSelectionChanged.connect(self._on_project)
        self.keep_out_button = QPushButton("Keep out…")
        self.keep_out_button.setToolTip("Stop capturing the selected project (saved to the capture settings)")
        self.keep_out_button.clicked.connect(self._confirm_keep_out)
        left = QWidget()
        box = QVBoxLayout(left)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.projects, 1)
        box.addWidget(self.keep_out_button)
        self.sessions = make_table(SESSION_COLUMNS, 3)
        self.sessions.itemSelectionChanged.connect(self._on_session)
        self.signals = QLabel("Select a session to read it.")
        self.signals.setWordWrap(True)
        self.viewer = QTextBrowser()
        self.viewer.setOpenLinks(False)
        reader = QWidget()
        col = QVBoxLayout(reader)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.signals)
        col.addWidget(self.viewer, 1)
        right = splitter(Qt.Orientation.Vertical, (self.sessions, reader), [180, 280])
        return splitter(Qt.Orientation.Horizontal, (left, right), [260, 900])

    # --- refresh -----------------------------------------------------------------------------
    def refresh(self) -> None:
        q = self.controller.queries
        t = q.totals()
        g = grouped
        agents = ", ".join(f"{g(n)} {a}" for a, n in sorted(t.by_agent.items())) or "none yet"
        own, mixed = t.by_actor.get("student", 0), t.by_actor.get("mixed", 0)
        student = (f" · <b>the student's own work: {g(own)}</b>" + (f" (+{g(mixed)} mixed)" if mixed else "")
                   if own or mixed else "")
        self.totals.setText(f"<b>{g(t.sessions)} sessions</b> ({agents}){student} · {g(t.messages)} messages · "
                            f"{g(t.quarantined)} in quarantine · {g(t.lines_in)} lines in = {g(t.stored)} stored + "
                            f"{g(t.quarantined_lines)} quarantined + {g(t.skipped)} skipped")
        self.totals.setToolTip("The student's own work: sessions the school's student (or a model capture.json lists "
                               "as not a teacher) acted in; kept apart, never a teacher example")
        self._fill_charts(q.sessions_per_day(MAX_DAYS), q.tool_histogram())
        projects = q.projects()
        fill(self.projects, [[ALL, sum(p[1] for p in projects), sum(p[2] for p in projects)], *map(list, projects)],
             [None] + [p[0] for p in projects])
        reselect(self.projects, self.project)
        self._fill_sessions()
        items = q.quarantine()
        fill(self.quarantine, [[i.source_path, i.line, i.reason, i.excerpt[:300]] for i in items])
        self.side_tabs.setTabText(1, f"Quarantine ({len(items)})")
        self.refresh_sources()

    def refresh_sources(self) -> None:
        fill(self.sources, [[s.agent, s.root, s.state, ago(s.last_event), s.error]
                            for s in self.controller.sources()])

    def _fill_charts(self, per_day: dict[str, dict[str, int]], tools: list[tuple[str, int]]) -> None:
        days = sorted(per_day)[-MAX_DAYS:]
        agents = sorted({a for d in days for a in per_day[d]})
        self.per_day.set_data(days, {a: [per_day[d].get(a, 0) for d in days] for a in agents},
                              labels=[d[5:] for d in days])
        self.tools.set_data(tools)

    def _fill_sessions(self) -> None:
        project = None if self.project in (None, "(none)") else self.project
        rows = self.controller.queries.recent_sessions(project=project)
        if self.project == "(none)":
            rows = [r for r in rows if r.project is None]
        self.rows = {r.id: r for r in rows}
        fill(self.sessions, [[local_time(r.started_at, zoneless_utc=False), _acted(r), r.project, r.title,
                              r.messages, r.tool_calls, r.errors, r.outcome] for r in rows], [r.id for r in rows])
        reselect(self.sessions, self.session_id)
        current = self.rows.get(self.session_id)
        if current is not None and (current.id, current.messages) != self.shown:
            self.show_session(current)

    # --- user actions ------------------------------------------------------------------------
    def _on_project(self) -> None:
        self.project = key_at(self.projects)
        self.keep_out_button.setEnabled(self.project not in (None, "(none)"))
        self._fill_sessions()

    def _on_session(self) -> None:
        self.session_id = key_at(self.sessions)
        if self.session_id in self.rows:
            self.show_session(self.rows[self.session_id])

    def select_session(self, session_id: str) -> None:
        reselect(self.sessions, session_id)
        self._on_session()

    def show_session(self, summary: SessionSummary) -> None:
        q = self.controller.queries
        sig, subs = q.signals(summary.id), q.subagents(summary.id)
        self.signals.setText(signals_text(sig, len(subs)))
        scroll = self.viewer.verticalScrollBar().value() if self.shown and self.shown[0] == summary.id else 0
        self.viewer.setHtml(render_transcript(summary, q.transcript(summary.id), subs))
        self.viewer.verticalScrollBar().setValue(scroll)
        self.shown = (summary.id, summary.messages)

    def choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Import transcripts or datasets", "",
                                                "JSONL / JSON (*.jsonl *.json);;All (*)")
        if paths:
            self.controller.import_paths(paths)

    def _confirm_keep_out(self) -> None:
        if self.project in (None, "(none)"):
            return
        answer = QMessageBox.question(self, "Keep a project out", f"Stop capturing sessions of '{self.project}'?")
        if answer == QMessageBox.StandardButton.Yes:
            self.controller.keep_out(self.project)

    def show_message(self, level: str, text: str) -> None:
        self.banner.show_message(level, text)


# --- transcript rendering (HTML-escaped, long texts cut) -------------------------------------------
def signals_text(sig: dict, subagents: int) -> str:
    if not sig:
        return "No signals for this session."
    return (f"Outcome <b>{sig.get('outcome', '?')}</b> · exploration {sig.get('exploration', '?')} "
            f"({count(sig.get('reads_before_first_edit', 0), 'read')} before the first edit) · "
            f"{count(sig.get('errors', 0), 'tool error')}, {sig.get('recoveries', 0)} recovered · "
            f"{count(sig.get('self_corrections', 0), 'self-correction')} · "
            f"{count(sig.get('reasoning_markers', 0), 'reasoning marker')} · {count(subagents, 'sub-agent')}")


def count(n: int, noun: str) -> str:
    return f"{grouped(n)} {noun}{'s' * (n != 1)}"


def clip(text: str, limit: int = MAX_PART_CHARS) -> str:
    """HTML-escaped text, cut after limit characters with a note of how much was left out."""
    if len(text) <= limit:
        return escape(text)
    return escape(text[:limit]) + f"<br><i style='color:{FAINT}'>… {len(text) - limit:,} more characters</i>"


def block(text: str, colour: str | None = None, mono: bool = False, italic: bool = False) -> str:
    """A pre-wrapped, indented block; colour None keeps the palette's text colour."""
    style = (f"color:{colour};" if colour else "") + ("font-family:monospace;" if mono else "") + \
        ("font-style:italic;" if italic else "")
    return f"<div style='white-space:pre-wrap;{style}margin-left:12px'>{text}</div>"


def part_html(part) -> str:
    if part.kind == "thinking":
        return block("thinking: " + clip(part.text), FAINT, italic=True)
    if part.kind == "tool_call":
        args = json.dumps(part.tool_input, indent=2, ensure_ascii=False, default=str)
        return (f"<div style='color:#ffb86c;margin-left:12px'><b>→ {escape(part.tool_name or '?')}</b></div>"
                + block(clip(args), mono=True))
    if part.kind == "tool_result":
        label = "error" if part.is_error else "result"
        colour = "#ff8a8a" if part.is_error else None
        name = f" of {escape(part.tool_name)}" if part.tool_name else ""
        return (f"<div style='color:{colour or '#ffb86c'};margin-left:12px'><b>← {label}{name}</b></div>"
                + block(clip(part.text), colour, mono=True))
    if part.kind == "image":
        return block(f"[image{': ' + escape(part.text) if part.text else ''} — not shown]", FAINT)
    return block(clip(part.text))


def message_html(m: TranscriptMessage) -> str:
    role = "compaction summary" if m.compact_summary else f"{m.role} (harness)" if m.meta else m.role
    colour = "#f1c40f" if m.compact_summary else ROLE_COLOURS.get(m.role, FAINT)
    stamp = local_time(m.timestamp, "%Y-%m-%d %H:%M:%S", zoneless_utc=False)
    head = (f"<p style='margin-top:10px;margin-bottom:2px'><b style='color:{colour}'>{escape(role.upper())}</b>"
            f" <span style='color:{FAINT}'>{escape(stamp)}</span></p>")
    return head + "".join(part_html(p) for p in m.parts)


def render_transcript(summary: SessionSummary, messages: list[TranscriptMessage], subagents: list) -> str:
    started = local_time(summary.started_at, zoneless_utc=False)
    out = [f"<h3>{escape(summary.title or '(untitled)')}</h3>",
           f"<p style='color:{FAINT}'>{escape(summary.agent)} · {escape(summary.model or 'model unknown')} · "
           f"{escape(summary.project or '(no project)')} · started {escape(started)}</p>"]
    if subagents:
        items = "".join(f"<li>{escape(s.title or s.id)} — {s.messages} messages, {s.tool_calls} tool calls</li>"
                        for s in subagents)
        out.append(f"<p style='color:#c792ea'><b>Sub-agents ({len(subagents)})</b></p><ul>{items}</ul>")
    used = 0
    for index, m in enumerate(messages):
        if used > MAX_TRANSCRIPT_CHARS:
            out.append(f"<p style='color:{FAINT}'><i>… {len(messages) - index} more messages not shown</i></p>")
            break
        html = message_html(m)
        used += len(html)
        out.append(html)
    return "".join(out)

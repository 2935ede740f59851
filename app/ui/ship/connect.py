"""The Ship tab's "Use it in…" box: which agent tools (Codex CLI, opencode, aider, Continue) are connected to the
served student; Connect… shows what will be written where, Write it writes it (a backup first) and checks the
endpoint live; Disconnect restores what was there. The core's ship/connect does the work, on worker threads."""
from __future__ import annotations

import threading
from html import escape

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QGridLayout, QGroupBox, QHBoxLayout, QLabel, QVBoxLayout

from app.core.ship.connect import connection, work
from app.core.ship.connect.agents import AGENTS
from app.ui.background import BackgroundController
from app.ui.kit import DIM_STYLE, arrange, button, label


class ConnectController(BackgroundController):
    """Reads which tools are connected; plans, connects and disconnects one at a time, off the GUI thread."""

    tools_changed = Signal(object)  # list of connection.connections() rows
    planned = Signal(object)  # a plan's payload: what connecting would write where (nothing written yet)
    work_changed = Signal(object)  # ship/connect/work.read: what the student did where it is connected

    def __init__(self, store=None) -> None:
        super().__init__()
        self.store = store
        self.tools: list[dict] = []

    def refresh(self) -> None:
        def read() -> None:
            self._post(self._on_tools, (connection.connections(),))
            if self.store is not None:
                self._post(self.work_changed.emit, (work.read(self.store),))

        threading.Thread(target=read, name="connect-list", daemon=True).start()

    def _on_tools(self, tools: list[dict]) -> None:
        self.tools = tools
        self.tools_changed.emit(tools)

    def _step(self, name: str, call, done, failed: str) -> bool:
        if self.busy:
            return False
        self._set_busy(True)
        self._background(f"connect-{name}", call, done, failed)
        return True

    def plan(self, name: str) -> bool:
        """What connecting `name` would write (shown before anything is written)."""
        return self._step(name, lambda: connection.plan(name).payload(), self.planned.emit,
                          f"{AGENTS[name].title} cannot be connected")

    def connect(self, name: str) -> bool:
        return self._step(name, lambda: connection.connect(name).payload(), self._on_connected,
                          f"{AGENTS[name].title} was not connected")

    def disconnect(self, name: str) -> bool:
        return self._step(name, lambda: connection.disconnect(name), lambda done: self._on_disconnected(name, done),
                          f"{AGENTS[name].title} was not disconnected")

    def _on_connected(self, out: dict) -> None:
        check = out["check"]
        said = ("the endpoint answered a tool-calling request" if check["ok"] else
                f"but the live check failed: {check['why']}")
        self.message.emit("info" if check["ok"] else "error",
                          f"Connected {out['title']}: {said}. Then run: {' ; '.join(out['run'])}")
        self.refresh()

    def _on_disconnected(self, name: str, done: list[dict]) -> None:
        self.message.emit("info", f"Disconnected {AGENTS[name].title}: " + "; ".join(
            f"{connection.shown(f['path'])} {f['action']}" for f in done) + ".")
        self.refresh()

    def stop(self) -> None:
        self._closed = True


def plan_html(plan: dict) -> str:
    """What will be written where: each file, its backup, the entry added, how the key is passed."""
    ep = plan["endpoint"]
    lines = [(f"<b>Connect {escape(plan['title'])}</b> to <code>{escape(ep['base_url'])}</code> "
              f"(model <code>{escape(ep['model'])}</code>)")]
    for f in plan["files"]:
        backup = (f"backup first: <code>{escape(connection.shown(f['backup']))}</code>" if f["backup"]
                  else "a new file")
        lines.append(f"{escape(f['action'])} <code>{escape(connection.shown(f['path']))}</code> — "
                     f"{escape(f['what'])} ({backup})<pre>{escape(f['added'])}</pre>")
    lines.append(f"<span style='{DIM_STYLE}'>{escape(plan['key'])}. Then: "
                 f"{escape(' ; '.join(plan['run']))}</span>")
    return "<br>".join(lines)


class ConnectBox(QGroupBox):
    """One row per tool (its state, Connect…, Disconnect) and the pending plan with Write it / Cancel."""

    def __init__(self, controller: ConnectController) -> None:
        super().__init__("Use it in…")
        self.controller, self.pending = controller, None
        self.states, self.connect_buttons, self.disconnect_buttons = {}, {}, {}
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        for row, agent in enumerate(AGENTS.values()):
            self.states[agent.name] = label(style=DIM_STYLE)
            self.connect_buttons[agent.name] = button("Connect…", lambda _=False, n=agent.name: controller.plan(n),
                                                      f"Show what connecting {agent.title} writes, and where")
            self.disconnect_buttons[agent.name] = button(
                "Disconnect", lambda _=False, n=agent.name: controller.disconnect(n),
                f"Restore {agent.title}'s config exactly as it was before connecting")
            for col, widget in enumerate((QLabel(agent.title), self.states[agent.name],
                                          self.connect_buttons[agent.name], self.disconnect_buttons[agent.name])):
                grid.addWidget(widget, row, col)
        self.work = label(style=DIM_STYLE, selectable=True)  # where it is connected, what it did there this week
        self.plan = label(selectable=True)
        self.write_button = button("Write it", self.write, "Back up each file, then write the entry shown")
        self.cancel_button = button("Cancel", self.cancel, "Write nothing")
        self.plan_row = QHBoxLayout()
        arrange(self.plan_row, 1, self.write_button, self.cancel_button)
        arrange(QVBoxLayout(self), grid, self.work, self.plan, self.plan_row)
        controller.tools_changed.connect(self._on_tools)
        controller.work_changed.connect(lambda reading: self.work.setText(work.words(reading)))
        controller.planned.connect(self._on_plan)
        controller.busy_changed.connect(self._on_busy)
        self.cancel()

    def _on_tools(self, tools: list[dict]) -> None:
        for tool in tools:
            changed = " (changed since)" if tool["changed"] else ""
            self.states[tool["agent"]].setText(f"connected{changed}" if tool["connected"] else "not connected")
        self._update_buttons()

    def _on_plan(self, plan: dict) -> None:
        self.pending = plan["agent"]
        self.plan.setText(plan_html(plan))
        self.plan.show()
        self._update_buttons()

    def _on_busy(self, _busy: bool) -> None:
        self._update_buttons()

    def write(self) -> None:
        if self.pending is not None and self.controller.connect(self.pending):
            self.cancel()

    def cancel(self) -> None:
        self.pending = None
        self.plan.clear()
        self.plan.hide()
        self._update_buttons()

    def _update_buttons(self) -> None:
        idle = not self.controller.busy
        connected = {t["agent"] for t in self.controller.tools if t["connected"]}
        for name in AGENTS:
            self.connect_buttons[name].setEnabled(idle and self.pending is None)
            self.disconnect_buttons[name].setEnabled(idle and name in connected)
        for widget in (self.write_button, self.cancel_button):
            widget.setVisible(self.pending is not None)
            widget.setEnabled(idle)

"""The School tab's charts: held-out agreement / validity and loss over cycles (the base model's as dashed lines), and
the blind test's indistinguishable share per model with its interval, n, the 45 % goal line and 50 % chance."""
from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.core.judge.blind.figure import CHANCE, GOAL
from app.ui.judge.blind_words import blind_lines, figure_rows  # noqa: F401 - blind_lines: the School panel reads it here
from app.ui.school.words import base_points, chart_points
from widgets.charts import LiveChart
from widgets.share_chart import Share, ShareChart

COLOURS = {"agreement": "#4f8cff", "validity": "#2ecc71", "loss": "#ff9f43"}
CHART_STYLE = {**{key: {"colour": colour, "symbol": "o"} for key, colour in COLOURS.items()},
               **{f"base {key}": {"colour": colour, "pen": pg.mkPen(colour, width=1, style=Qt.PenStyle.DashLine)}
                  for key, colour in COLOURS.items()}}
BLIND_EMPTY = "No blind test yet: take one in the Judge tab (Blind test)"
BLIND_TIP = ("Blind test: the share of trials where a person did not pick the agent's answer (a wrong pick or can't "
             "tell), per model, with its 95 % interval (whole sessions resampled) and the number of trials. 50 % is "
             "chance; above 45 % is the goal.")


class SchoolCharts(QWidget):
    """show(history, blind): the cycles' held-out scores and the blind test's figures (School.blind_results)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.scores_chart = LiveChart("Held-out agreement · validity", "", ["agreement", "validity",
                                      "base agreement", "base validity"], x_label="cycle", styles=CHART_STYLE,
                                      legend="none")
        self.loss_chart = LiveChart("Held-out loss", "", ["loss", "base loss"], x_label="cycle", styles=CHART_STYLE,
                                    legend="none")
        self.blind_chart = ShareChart("Blind test", "indistinguishable", GOAL, CHANCE, empty=BLIND_EMPTY)
        self.blind_chart.setToolTip(BLIND_TIP)
        for chart in (self.scores_chart, self.loss_chart, self.blind_chart):
            chart.setMinimumHeight(150)
        self.scores_chart.setYRange(0, 1, padding=0.05)
        self.legend = QLabel("<span style='color:#4f8cff'>● agreement</span>&nbsp;&nbsp;"
                             "<span style='color:#2ecc71'>● validity</span>&nbsp;&nbsp;"
                             "<span style='color:#ff9f43'>● loss</span>&nbsp;&nbsp;"
                             "<span style='color:#9aa0aa'>- - the base model</span>")
        row = QHBoxLayout()
        row.addWidget(self.scores_chart, 4)
        row.addWidget(self.loss_chart, 4)
        row.addWidget(self.blind_chart, 3)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row, 1)
        layout.addWidget(self.legend)

    def show_state(self, history: list[dict], blind: list[dict]) -> None:
        self._show_cycles(history)
        self.blind_chart.set_data([Share(*row) for row in figure_rows(blind)])

    def _show_cycles(self, history: list[dict]) -> None:
        points = chart_points(history)
        base = base_points(history)
        xs_all = sorted({x for pts in points.values() for x, _ in pts})
        for chart, keys in ((self.scores_chart, ("agreement", "validity")), (self.loss_chart, ("loss",))):
            for key in keys:
                pts = points[key]
                chart.set_series(key, [x for x, _ in pts], [y for _, y in pts])
                if key in base and xs_all:
                    lo, hi = xs_all[0], xs_all[-1]
                    chart.set_series(f"base {key}", [lo - 0.3, hi + 0.3], [base[key], base[key]])
                else:
                    chart.set_series(f"base {key}", [], [])
            chart.set_notice(None if any(points[k] for k in keys) else "no judged cycle yet")
            step = max(1, math.ceil(len(xs_all) / 8))  # whole cycle numbers on the axis
            chart.getAxis("bottom").setTickSpacing(step, step)

"""A share per model as bars with their intervals, against a goal line and a chance line (pyqtgraph; given data only):
the blind test's indistinguishable share on the School tab."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from widgets.charts import COLOURS, TITLE_SIZE, TITLE_TEXT, PlotNotice
from widgets.palette import BACKGROUND, DIM, GOOD, WARN

BAR, INTERVAL = COLOURS[0], "#d8dae0"


@dataclass(frozen=True)
class Share:
    """One bar: its label, the share (0…1), its interval (None: none), the count behind it."""

    label: str
    share: float
    low: float | None = None
    high: float | None = None
    n: int = 0


class ShareChart(pg.PlotWidget):
    """set_data(shares): one bar per share (labelled with its n), an error bar for its interval; a solid line
    at `goal` and a dashed one at `chance`, each named at its right end; y in percent, 0…100."""

    def __init__(self, title: str, y_label: str, goal: float, chance: float, goal_words: str = "goal",
                 chance_words: str = "chance", empty: str = "", parent=None) -> None:
        super().__init__(parent=parent, background=BACKGROUND)
        self.setTitle(title, color=TITLE_TEXT, size=TITLE_SIZE)
        self.setLabel("left", y_label, color=DIM)
        self.showGrid(x=False, y=True, alpha=0.15)
        self.setMouseEnabled(x=False, y=False)
        self.setMenuEnabled(False)
        self.hideButtons()
        for side in ("left", "bottom"):
            self.getAxis(side).setTextPen(DIM)
        self.getAxis("left").setWidth(52)
        self.getAxis("left").setTicks([[(v / 100, f"{v} %") for v in range(0, 101, 25)], []])
        self.setYRange(0, 1, padding=0.02)
        self.goal_line = self._line(goal, pg.mkPen(GOOD, width=1.5), f"{goal_words} {goal * 100:.0f} %", below=True)
        self.chance_line = self._line(chance, pg.mkPen(WARN, width=1, style=Qt.PenStyle.DashLine),
                                      f"{chance_words} {chance * 100:.0f} %", below=False)
        self.empty, self.notice = empty, PlotNotice(self)
        self._say_empty(True)
        self.bars: pg.BarGraphItem | None = None
        self.errors: pg.ErrorBarItem | None = None
        self.values: list[pg.TextItem] = []
        self.shares: list[Share] = []

    def _line(self, y: float, pen, words: str, below: bool) -> pg.InfiniteLine:
        """A horizontal line over the bars, its words at its right end, under it or over it (two lines 5 % apart
        keep their words apart)."""
        anchor = (1, 0) if below else (1, 1)
        line = pg.InfiniteLine(pos=y, angle=0, movable=False, pen=pen, label=words,
                               labelOpts={"position": 0.98, "color": pen.color().name(), "fill": (30, 31, 36, 220),
                                          "anchors": [anchor, anchor]})
        line.setZValue(10)
        self.addItem(line, ignoreBounds=True)
        return line

    def set_data(self, shares: list[Share]) -> None:
        for item in (self.bars, self.errors, *self.values):
            if item is not None:
                self.removeItem(item)
        self.bars = self.errors = None
        self.values = []
        self.shares = list(shares)
        xs = list(range(len(shares)))
        if shares:
            self.bars = pg.BarGraphItem(x=xs, height=[s.share for s in shares], width=0.5, brush=BAR,
                                        pen=pg.mkPen(BACKGROUND))
            self.addItem(self.bars)
            for x, share in zip(xs, shares):  # the share in words inside its bar's foot
                value = pg.TextItem(f"{share.share * 100:.0f} %", color=TITLE_TEXT, anchor=(0.5, 1), fill=BAR)
                value.setPos(x, 0)
                value.setZValue(20)
                self.addItem(value)
                self.values.append(value)
            known = [(x, s) for x, s in zip(xs, shares) if s.low is not None and s.high is not None]
            if known:
                self.errors = pg.ErrorBarItem(x=np.array([x for x, _ in known], dtype=float),
                                              y=np.array([s.share for _, s in known]),
                                              top=np.array([s.high - s.share for _, s in known]),
                                              bottom=np.array([s.share - s.low for _, s in known]), beam=0.15,
                                              pen=pg.mkPen(INTERVAL, width=1.5))  # arrays: it subtracts them
                self.addItem(self.errors)
        self.getAxis("bottom").setTicks([[(x, f"{s.label} (n={s.n})") for x, s in zip(xs, shares)], []])
        self.setXRange(-0.6, max(len(shares), 1) - 0.4, padding=0)
        self.setYRange(0, 1, padding=0.02)
        self._say_empty(not shares)

    def _say_empty(self, empty: bool) -> None:
        """The empty notice, or the lines' words: never both (they overlap in a narrow chart)."""
        self.notice.say(self.empty if empty else "")
        for line in (self.goal_line, self.chance_line):
            line.label.setVisible(not empty)

    def heights(self) -> list[float]:
        """The bars' heights as drawn (tests)."""
        return [] if self.bars is None else [float(h) for h in self.bars.opts["height"]]

    def ticks(self) -> list[str]:
        """The labels under the bars (tests)."""
        return [f"{s.label} (n={s.n})" for s in self.shares]

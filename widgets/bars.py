"""Bar charts (pyqtgraph BarGraphItem): stacked vertical bars per category with a legend, and a labelled histogram."""
from __future__ import annotations

import pyqtgraph as pg

from widgets.charts import COLOURS, PlotNotice
from widgets.palette import BACKGROUND, DIM

MAX_TICKS = 7  # category labels shown on the bottom axis at most (every k-th beyond that)
MAX_BARS = 10  # bars a histogram shows at most: the smallest beyond that are summed in one "k others" bar


def _whole_ticks(axis: pg.AxisItem, top: float) -> None:
    """Counts: ticks on whole numbers; past ten, pyqtgraph's own round spacing, which leaves room for the labels (a
    fixed fifth of the top wrote "243486729972" on a narrow chart)."""
    if top <= 10:
        axis.setTickSpacing(1, 1)
    else:
        axis.setTickSpacing()


def _plot(widget: pg.PlotWidget, title: str) -> None:
    widget.setTitle(title, color="#d8dae0", size="10pt")
    widget.showGrid(x=False, y=True, alpha=0.15)
    widget.setMouseEnabled(x=False, y=False)
    widget.setMenuEnabled(False)
    widget.hideButtons()
    for side in ("left", "bottom"):
        widget.getAxis(side).setTextPen(DIM)


class StackedBars(pg.PlotWidget):
    """Categories along x, one stacked bar segment per series (e.g. sessions per day per agent)."""

    def __init__(self, title: str, colours: dict[str, str] | None = None, empty: str = "", parent=None) -> None:
        """empty: what the chart says inside the plot while it has no category."""
        super().__init__(parent=parent, background=BACKGROUND)
        _plot(self, title)
        self.empty, self.notice = empty, PlotNotice(self)
        self.notice.say(empty)
        self.colours = dict(colours or {})
        self.legend = self.addLegend(offset=(-5, 5), brush=pg.mkBrush(30, 31, 36, 220), labelTextColor="#d8dae0")
        self.bars: dict[str, pg.BarGraphItem] = {}
        self.categories: list[str] = []

    def set_data(self, categories: list[str], series: dict[str, list[float]], labels: list[str] | None = None) -> None:
        """series: name -> one value per category (stacked in the given order)."""
        for item in self.bars.values():
            self.removeItem(item)
        self.legend.clear()
        self.bars, self.categories = {}, list(categories)
        base = [0.0] * len(categories)
        for i, (name, values) in enumerate(series.items()):
            colour = self.colours.get(name, COLOURS[i % len(COLOURS)])
            item = pg.BarGraphItem(x=list(range(len(categories))), height=list(values), y0=list(base), width=0.8,
                                   brush=colour, pen=pg.mkPen(BACKGROUND))
            self.addItem(item)
            self.legend.addItem(item, name)
            self.bars[name] = item
            base = [b + v for b, v in zip(base, values)]
        self._ticks(labels or categories)
        self.notice.say("" if categories else self.empty)
        self.setXRange(-0.6, max(len(categories), 1) - 0.4, padding=0)
        self.setYRange(0, max(base, default=0) * 1.4 or 1, padding=0)  # room for the legend
        _whole_ticks(self.getAxis("left"), max(base, default=0))

    def heights(self, name: str) -> list[float]:
        return [float(h) for h in self.bars[name].opts["height"]]

    def _ticks(self, labels: list[str]) -> None:
        step = max(1, -(-len(labels) // MAX_TICKS))
        self.getAxis("bottom").setTicks([[(i, t) for i, t in enumerate(labels) if i % step == 0], []])


class LabelledBars(pg.PlotWidget):
    """A horizontal histogram: one bar per label, the labels as ticks on the left axis, the largest on top."""

    def __init__(self, title: str, colour: str = COLOURS[0], empty: str = "", parent=None) -> None:
        """empty: what the chart says inside the plot while it has no bar."""
        super().__init__(parent=parent, background=BACKGROUND)
        _plot(self, title)
        self.empty, self.notice = empty, PlotNotice(self)
        self.notice.say(empty)
        self.showGrid(x=True, y=False, alpha=0.15)
        self.colour = colour
        self.item: pg.BarGraphItem | None = None
        self.labels: list[str] = []

    def set_data(self, pairs: list[tuple[str, float]]) -> None:
        """pairs: largest first. Past MAX_BARS the smallest are summed in one bar (their labels ran into each
        other on a chart of a real corpus's 20 tools)."""
        if self.item is not None:
            self.removeItem(self.item)
        if len(pairs) > MAX_BARS:
            rest = pairs[MAX_BARS - 1:]
            pairs = pairs[:MAX_BARS - 1] + [(f"{len(rest)} others", sum(v for _, v in rest))]
        self.labels = [label for label, _ in pairs]
        n = len(pairs)
        ys = [n - 1 - i for i in range(n)]  # first pair at the top
        self.item = pg.BarGraphItem(x0=0, y=ys, width=[v for _, v in pairs], height=0.7, brush=self.colour,
                                    pen=pg.mkPen(BACKGROUND))
        self.addItem(self.item)
        self.getAxis("left").setTicks([[(y, label) for y, label in zip(ys, self.labels)], []])
        self.notice.say("" if pairs else self.empty)
        self.setYRange(-0.6, max(n, 1) - 0.4, padding=0)
        top = max((v for _, v in pairs), default=0)
        self.setXRange(0, top * 1.1 or 1, padding=0)
        _whole_ticks(self.getAxis("bottom"), top)

    def values(self) -> dict[str, float]:
        if self.item is None:
            return {}
        return {label: float(w) for label, w in zip(self.labels, self.item.opts["width"])}

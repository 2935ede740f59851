"""Streaming line charts (pyqtgraph): curves created once, setData on a throttled timer, peak downsampling.

Points arrive in step order; a point whose x is not past the last one (a resumed run re-emitting steps it had
already reported) first drops the points from that x on, so a series always shows the latest value per step.
"""
from __future__ import annotations

from bisect import bisect_left

import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRect, Qt, QTimer
from PySide6.QtWidgets import QLabel

from widgets.palette import BACKGROUND, DIM, FAINT

REDRAW_MS = 100  # at most 10 redraws a second, however fast points arrive
COLOURS = ["#4f8cff", "#ff9f43", "#2ecc71", "#e056fd", "#00d2d3", "#feca57", "#ff6b6b", "#a29bfe"]
AXIS_TEXT = DIM
TITLE_TEXT = "#d8dae0"
TITLE_SIZE = "9pt"
NOTICE_TEXT = FAINT
NOTICE_SIZE = "10pt"
MARKER_PEN = pg.mkPen("#feca57", width=1, style=Qt.PenStyle.DashLine)
HIGHLIGHT_PEN = pg.mkPen("#ff5c5c", width=1, style=Qt.PenStyle.DotLine)


class PlotNotice(QLabel):
    """Grey words inside a plot's data area (what will appear there, or why nothing can): centred, wrapped to the
    view box and kept inside it as the plot resizes, so they never run over the axes or the title."""

    MARGIN = 6  # pixels kept free on each side inside the view box

    def __init__(self, plot: pg.PlotWidget) -> None:
        super().__init__(plot)
        self._plot = plot
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWordWrap(True)
        self.setStyleSheet(f"color:{NOTICE_TEXT};background:transparent;font-size:{NOTICE_SIZE};")
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.hide()
        plot.getPlotItem().getViewBox().sigResized.connect(self.place)

    def say(self, text: str) -> None:
        self.setText(text)
        self.setVisible(bool(text))
        self.place()

    def shown(self) -> str:
        return "" if self.isHidden() else self.text()

    def view_rect(self) -> QRect:
        """The view box (the data area) in the plot widget's coordinates."""
        box = self._plot.getPlotItem().getViewBox()
        rect = self._plot.mapFromScene(box.sceneBoundingRect()).boundingRect()
        return rect.translated(self._plot.viewport().mapTo(self._plot, QPoint(0, 0)))

    def place(self, *_resized) -> None:
        m = self.MARGIN
        self.setGeometry(self.view_rect().adjusted(m, m, -m, -m))


class LiveChart(pg.PlotWidget):
    """A chart of named series; append points any time, the view redraws at most every REDRAW_MS.

    ``styles`` gives a series its own look (``{"pen": ..., "symbol": "o"}``); series not named up front are
    created on their first point (e.g. reward components), each curve once.
    """

    def __init__(self, title: str, y_label: str, series: list[str], x_label: str | None = "step",
                 styles: dict[str, dict] | None = None, legend: str | None = None, si_prefix: bool = False,
                 empty: str = "", parent=None) -> None:
        """legend: "title" (coloured names in the title, nothing over the data; the default for several series),
        "overlay" (a pyqtgraph legend in the top-left corner, for series made on the fly) or "none".
        empty: what the chart says inside the plot while no series has a point (what will appear there)."""
        super().__init__(parent=parent, background=BACKGROUND)
        self._title = title
        self._title_shown: tuple[str, ...] | None = None
        self.setTitle(title, color=TITLE_TEXT, size=TITLE_SIZE)
        self.setLabel("left", y_label, color=AXIS_TEXT)
        if x_label:
            self.setLabel("bottom", x_label, color=AXIS_TEXT)
        for side in ("left", "bottom"):
            self.getAxis(side).setTextPen(AXIS_TEXT)
        self.getAxis("left").setWidth(52)  # the grid's plots line up whatever their tick labels
        self.getAxis("left").enableAutoSIPrefix(si_prefix)  # "reward (x0.001)" reads worse than 0.5
        self.showGrid(x=True, y=True, alpha=0.15)
        self.hideButtons()
        self._styles = dict(styles or {})
        self._legend_mode = legend or ("title" if len(series) > 1 else "none")
        self.legend = None
        if self._legend_mode == "overlay":
            self.legend = self.addLegend(offset=(4, 2), brush=pg.mkBrush(30, 31, 36, 190), labelTextSize="8pt",
                                         verSpacing=-8, horSpacing=10, colCount=3)
        self._in_legend: set[str] = set()
        self._data: dict[str, tuple[list[float], list[float]]] = {}
        self._curves: dict[str, pg.PlotDataItem] = {}
        for name in series:
            self.ensure_series(name)
        self._markers: list[pg.InfiniteLine] = []
        self._highlight: pg.InfiniteLine | None = None
        self._notice = PlotNotice(self)
        self._said = ""  # the notice set by set_notice (it wins over the empty text)
        self._empty = empty
        self._show_notice()
        self._dirty = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)  # started by the first change after a redraw: no wake-ups while idle
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self._redraw)

    # --- series ----------------------------------------------------------------------------------
    def ensure_series(self, name: str) -> None:
        """Create the curve of a series (once)."""
        if name in self._curves:
            return
        style = self._styles.get(name, {})
        colour = style.get("colour", COLOURS[len(self._curves) % len(COLOURS)])
        pen = style.get("pen", pg.mkPen(colour, width=style.get("width", 2)))
        curve = self.plot([], [], pen=pen)
        if style.get("symbol"):
            curve.setSymbol(style["symbol"])
            curve.setSymbolSize(style.get("symbol_size", 6))
            curve.setSymbolBrush(pg.mkBrush(colour))
            curve.setSymbolPen(pg.mkPen(colour))
        curve.setDownsampling(auto=True, method="peak")
        curve.setClipToView(True)
        self._curves[name] = curve
        self._data.setdefault(name, ([], []))

    def series(self) -> list[str]:
        return list(self._curves)

    def append(self, name: str, x: float, y: float | None) -> None:
        if y is None:
            return
        self.ensure_series(name)
        xs, ys = self._data[name]
        if xs and x <= xs[-1]:
            self.truncate(name, x)  # a step seen again (resume): the new value replaces the old ones
        xs.append(x)
        ys.append(y)
        self._changed()

    def truncate(self, name: str, x: float) -> None:
        """Drop the points of a series whose x is x or later."""
        if name not in self._data:
            return
        xs, ys = self._data[name]
        cut = bisect_left(xs, x)
        if cut < len(xs):
            del xs[cut:], ys[cut:]
            self._changed()

    def set_series(self, name: str, xs: list[float], ys: list[float]) -> None:
        self.ensure_series(name)
        self._data[name] = (list(xs), list(ys))
        self._changed()

    def clear_all(self) -> None:
        for name in self._data:
            self._data[name] = ([], [])
        self.clear_markers()
        self._changed()

    def points(self, name: str) -> list[tuple[float, float]]:
        """The points the chart holds for a series (what the user sees, before downsampling)."""
        xs, ys = self._data.get(name, ([], []))
        return list(zip(xs, ys))

    def drawn(self, name: str) -> int:
        """How many points the curve item currently has (after the last redraw)."""
        if name not in self._curves:
            return 0
        xs, _ = self._curves[name].getOriginalDataset()
        return 0 if xs is None else len(xs)

    def has_data(self) -> bool:
        return any(xs for xs, _ in self._data.values())

    # --- annotations -----------------------------------------------------------------------------
    def add_marker(self, x: float, label: str = "") -> None:
        """A dashed vertical line at x (e.g. where a run resumed), with an optional label at the top."""
        line = pg.InfiniteLine(pos=x, angle=90, movable=False, pen=MARKER_PEN, label=label or None,
                               labelOpts={"position": 0.97, "color": "#feca57", "fill": (30, 31, 36, 200),
                                          "anchors": [(1, 0), (1, 0)]})  # top, left of the line
        self.addItem(line, ignoreBounds=True)
        self._markers.append(line)

    def markers(self) -> list[float]:
        return [line.value() for line in self._markers]

    def clear_markers(self) -> None:
        for line in self._markers:
            self.removeItem(line)
        self._markers.clear()
        self.highlight(None)

    def highlight(self, x: float | None) -> None:
        """A dotted line at x (the selected alert's step); None hides it."""
        if x is None:
            if self._highlight is not None:
                self._highlight.hide()
            return
        if self._highlight is None:
            self._highlight = pg.InfiniteLine(angle=90, movable=False, pen=HIGHLIGHT_PEN)
            self.addItem(self._highlight, ignoreBounds=True)
        self._highlight.setValue(x)
        self._highlight.show()

    def set_notice(self, text: str | None) -> None:
        """Grey words inside the plot (e.g. "no GPU"), shown whatever the data; None or "" removes them (the empty
        text, if any, shows again while there is no point)."""
        self._said = text or ""
        self._show_notice()

    def set_empty_text(self, text: str) -> None:
        """What the chart says while it has no point (e.g. what will be drawn, and when)."""
        self._empty = text
        self._show_notice()

    def notice(self) -> str:
        """The words shown inside the plot, "" when none."""
        return self._notice.shown()

    def _show_notice(self) -> None:
        text = self._said or ("" if self.has_data() else self._empty)
        if text != self._notice.shown():
            self._notice.say(text)
            self.getPlotItem().showAxis("bottom", not text)  # no meaningless 0..1 step ticks under the words

    # --- drawing ---------------------------------------------------------------------------------
    def _changed(self) -> None:
        self._dirty = True
        if self._empty and not self._said and bool(self._notice.shown()) == self.has_data():
            self._show_notice()  # the first point came, or the last one went
        if not self._timer.isActive():
            self._timer.start()

    def _redraw(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        for name, (xs, ys) in self._data.items():
            curve = self._curves[name]
            curve.setData(xs, ys)
            if self.legend is None:
                continue
            if xs and name not in self._in_legend:
                self.legend.addItem(curve, self.legend_name(name))  # a series shows in the legend while it has data
                self._in_legend.add(name)
            elif not xs and name in self._in_legend:
                self.legend.removeItem(curve)
                self._in_legend.discard(name)
        if self._legend_mode == "title":
            self._update_title()

    def legend_name(self, name: str) -> str:
        return name

    def _update_title(self) -> None:
        """The title names the series that have data, each in its curve's colour (a legend over no data)."""
        shown = tuple(name for name, (xs, _) in self._data.items() if xs)
        if shown == self._title_shown:
            return
        self._title_shown = shown
        parts = []
        for name in shown:
            style = self._styles.get(name, {})
            colour = style.get("colour") or self._curves[name].opts["pen"].color().name()
            mark = "●" if style.get("symbol") else "━"
            parts.append(f"<span style='color:{colour}'>{mark} {name}</span>")
        text = self._title + ("&nbsp;&nbsp;&nbsp;" + "&nbsp;&nbsp;".join(parts) if len(parts) > 1 else "")
        self.setTitle(text, color=TITLE_TEXT, size=TITLE_SIZE)

    def title_text(self) -> str:
        return self.getPlotItem().titleLabel.text


class LossChart(LiveChart):
    """Train loss as a line, eval loss as markers joined by a dashed line."""

    def __init__(self, parent=None) -> None:
        super().__init__("Loss", "loss", ["loss", "eval loss"], styles={
            "eval loss": {"colour": COLOURS[1], "symbol": "o", "symbol_size": 6,
                          "pen": pg.mkPen(COLOURS[1], width=1.5, style=Qt.PenStyle.DashLine)}}, parent=parent)


class LrChart(LiveChart):
    def __init__(self, parent=None) -> None:
        super().__init__("Learning rate", "lr", ["lr"], styles={"lr": {"colour": COLOURS[2]}}, si_prefix=True,
                         parent=parent)


class GradNormChart(LiveChart):
    def __init__(self, parent=None) -> None:
        super().__init__("Gradient norm", "norm", ["grad norm"], styles={"grad norm": {"colour": COLOURS[3]}},
                         parent=parent)


class ThroughputChart(LiveChart):
    def __init__(self, parent=None) -> None:
        super().__init__("Throughput", "tokens/s", ["tokens/s"], styles={"tokens/s": {"colour": COLOURS[4]}},
                         parent=parent)


class MemoryChart(LiveChart):
    def __init__(self, parent=None) -> None:
        super().__init__("Memory", "MB", ["RAM", "VRAM"], parent=parent)


class GpuChart(LiveChart):
    """GPU utilisation in %, 0-100; says so when the engine reports no GPU."""

    def __init__(self, parent=None) -> None:
        super().__init__("GPU utilisation", "%", ["GPU"], styles={"GPU": {"colour": COLOURS[5]}}, parent=parent)
        self.setYRange(0, 100, padding=0.02)
        self.enableAutoRange(axis="y", enable=False)


class RewardChart(LiveChart):
    """RL jobs: the mean reward, and each reward component as a thinner line (created on its first point)."""

    def __init__(self, parent=None) -> None:
        super().__init__("Reward", "reward", ["reward"], styles={"reward": {"colour": "#ffffff", "width": 2.5}},
                         legend="overlay", parent=parent)

    def legend_name(self, name: str) -> str:
        return "mean" if name == "reward" else name.split(" · ", 1)[-1]  # short: the chart says "Reward"

    def ensure_series(self, name: str) -> None:
        if name not in self._curves and name != "reward" and name not in self._styles:
            self._styles[name] = {"colour": COLOURS[len(self._curves) % len(COLOURS)], "width": 1}
        super().ensure_series(name)

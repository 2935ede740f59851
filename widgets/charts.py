"""Streaming line charts (pyqtgraph): curves created once, setData on a throttled timer, peak downsampling."""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QTimer

REDRAW_MS = 100  # at most 10 redraws a second, however fast points arrive
COLOURS = ["#4f8cff", "#ff9f43", "#2ecc71", "#e056fd"]


class LiveChart(pg.PlotWidget):
    """A chart of named series; append points any time, the view redraws at most every REDRAW_MS."""

    def __init__(self, title: str, y_label: str, series: list[str], x_label: str = "step", parent=None) -> None:
        super().__init__(parent=parent, background="#1e1f24")
        self.setTitle(title, color="#d8dae0", size="10pt")
        self.setLabel("left", y_label, color="#9aa0aa")
        self.setLabel("bottom", x_label, color="#9aa0aa")
        self.showGrid(x=True, y=True, alpha=0.15)
        self.legend = self.addLegend(offset=(-10, 10), brush=pg.mkBrush(30, 31, 36, 220)) if len(series) > 1 else None
        self._in_legend: set[str] = set()
        self._data: dict[str, tuple[list[float], list[float]]] = {}
        self._curves: dict[str, pg.PlotDataItem] = {}
        for i, name in enumerate(series):
            curve = self.plot([], [], pen=pg.mkPen(COLOURS[i % len(COLOURS)], width=2))
            curve.setDownsampling(auto=True, method="peak")
            curve.setClipToView(True)
            self._curves[name] = curve
            self._data[name] = ([], [])
        self._dirty = False
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self._redraw)
        self._timer.start()

    def append(self, name: str, x: float, y: float | None) -> None:
        if y is None:
            return
        xs, ys = self._data[name]
        xs.append(x)
        ys.append(y)
        self._dirty = True

    def set_series(self, name: str, xs: list[float], ys: list[float]) -> None:
        self._data[name] = (list(xs), list(ys))
        self._dirty = True

    def clear_all(self) -> None:
        for name in self._data:
            self._data[name] = ([], [])
        self._dirty = True

    def points(self, name: str) -> list[tuple[float, float]]:
        """The points the chart holds for a series (what the user sees, before downsampling)."""
        xs, ys = self._data[name]
        return list(zip(xs, ys))

    def drawn(self, name: str) -> int:
        """How many points the curve item currently has (after the last redraw)."""
        xs, _ = self._curves[name].getOriginalDataset()
        return 0 if xs is None else len(xs)

    def _redraw(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        for name, (xs, ys) in self._data.items():
            self._curves[name].setData(xs, ys)
            if self.legend is not None and xs and name not in self._in_legend:
                self.legend.addItem(self._curves[name], name)  # a series shows in the legend once it has data
                self._in_legend.add(name)


class LossChart(LiveChart):
    def __init__(self, parent=None) -> None:
        super().__init__("Training loss", "loss", ["loss"], parent=parent)


class MemoryChart(LiveChart):
    def __init__(self, parent=None) -> None:
        super().__init__("Memory", "MB", ["RAM", "VRAM"], parent=parent)

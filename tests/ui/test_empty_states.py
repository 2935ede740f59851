"""GUI (offscreen): an empty chart says inside its plot what will appear there, and the words fit — wrapped inside
the data area, never over an axis or cut off: the Training tab with no job (and its alerts box says no job is
selected), the Capture tab's bars before any session, the Judge tab's training-loss chart before a comparison. The
words go when the first point comes."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QLabel

from app.core.capture.sources import CaptureConfig
from app.ui.capture.controller import CaptureController
from app.ui.capture.panel import CapturePanel
from app.ui.judge.controller import JudgeController
from app.ui.judge.panel import JudgePanel
from app.ui.training.controller import TrainingController
from app.ui.training.panel import TrainingPanel
from widgets.alerts import EMPTY_TEXT

WAIT_MS = 3000


def view_rect(chart) -> QRect:
    """The plot's data area (its view box) in the chart widget's coordinates."""
    box = chart.getPlotItem().getViewBox()
    return chart.mapFromScene(box.sceneBoundingRect()).boundingRect().translated(
        chart.viewport().mapTo(chart, QPoint(0, 0)))


def said(chart) -> QLabel | None:
    """The visible words over a chart, if any."""
    return next((w for w in chart.findChildren(QLabel) if w.isVisible() and w.text()), None)


def fits(chart) -> bool:
    """The words lie inside the data area, and their wrapped text inside their label."""
    label = said(chart)
    flags = int(label.alignment()) | (int(Qt.TextFlag.TextWordWrap) if label.wordWrap() else 0)
    text = label.fontMetrics().boundingRect(label.contentsRect(), flags, label.text())
    return view_rect(chart).contains(label.geometry()) and label.contentsRect().contains(text)


def shown(qtbot, panel, width: int, height: int) -> None:
    qtbot.addWidget(panel)
    panel.resize(width, height)
    panel.show()
    qtbot.waitExposed(panel)


def test_the_training_tabs_empty_charts_say_what_they_will_draw(qtbot, manager):
    panel = TrainingPanel(TrainingController(manager))
    shown(qtbot, panel, 1180, 700)
    charts = [panel.loss_chart, panel.lr_chart, panel.grad_chart, panel.throughput_chart, panel.memory_chart,
              panel.gpu_chart]
    qtbot.waitUntil(lambda: all(said(c) is not None and fits(c) for c in charts), timeout=WAIT_MS)
    assert "loss" in said(panel.loss_chart).text() and "Select or start a job" in said(panel.loss_chart).text()
    assert panel.alerts.diagnosis.placeholderText() != EMPTY_TEXT  # no job: not "no alerts for this job"
    assert "No job selected" in panel.alerts.diagnosis.placeholderText()

    panel.lr_chart.append("lr", 1, 1e-4)  # the first point: the words go, the other charts keep theirs
    assert panel.lr_chart.notice() == "" and "loss" in panel.loss_chart.notice()


def test_the_capture_tabs_empty_bars_say_what_they_will_draw(qtbot, store, tmp_path):
    controller = CaptureController(store, CaptureConfig(roots={}), watch=False, config_path=tmp_path / "capture.json")
    panel = CapturePanel(controller)
    shown(qtbot, panel, 1180, 700)
    qtbot.waitUntil(lambda: all(said(c) is not None and fits(c) for c in (panel.per_day, panel.tools)),
                    timeout=WAIT_MS)
    assert "session" in said(panel.per_day).text() and "tool" in said(panel.tools).text()
    panel.tools.set_data([("Bash", 3)])
    assert said(panel.tools) is None


@pytest.mark.parametrize("width", [1180, 900])
def test_the_judge_tabs_empty_loss_chart_keeps_its_words_inside(qtbot, store, width):
    panel = JudgePanel(JudgeController(store))
    shown(qtbot, panel, width, 700)
    qtbot.waitUntil(lambda: said(panel.chart) is not None and fits(panel.chart), timeout=WAIT_MS)
    assert "Compare" in said(panel.chart).text()

"""A dark Fusion palette that matches the charts' background, and the style that keeps empty boxes visible on it."""
from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPalette, QPen
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle

from widgets.palette import BACKGROUND, FAINT

COLOURS = {
    QPalette.ColorRole.Window: "#25262b", QPalette.ColorRole.WindowText: "#e4e6eb",
    QPalette.ColorRole.Base: BACKGROUND, QPalette.ColorRole.AlternateBase: "#2b2d33",
    QPalette.ColorRole.Text: "#e4e6eb", QPalette.ColorRole.Button: "#2f3138",
    QPalette.ColorRole.ButtonText: "#e4e6eb", QPalette.ColorRole.Highlight: "#4f8cff",
    QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.ToolTipBase: "#2f3138",
    QPalette.ColorRole.ToolTipText: "#e4e6eb", QPalette.ColorRole.PlaceholderText: FAINT,
}
INDICATOR_EDGE = FAINT  # an unticked box's or radio's outline: visible on Base and Window alike
INDICATOR_EDGE_OFF = "#5a5e66"  # … of a disabled one
INDICATORS = (QStyle.PrimitiveElement.PE_IndicatorCheckBox, QStyle.PrimitiveElement.PE_IndicatorRadioButton)


class DarkStyle(QProxyStyle):
    """Fusion, with check boxes and radio buttons outlined in INDICATOR_EDGE. Fusion outlines them in the window
    colour darkened, which on this palette is the colour of the box itself: an unticked box was invisible. Item views'
    check boxes and menus' checkable actions are drawn through PE_IndicatorCheckBox too."""

    def __init__(self) -> None:
        super().__init__("Fusion")

    def drawPrimitive(self, element, option, painter, widget=None) -> None:
        super().drawPrimitive(element, option, painter, widget)
        if element not in INDICATORS:
            return
        painter.save()
        painter.setBrush(Qt.BrushStyle.NoBrush)
        enabled = bool(option.state & QStyle.StateFlag.State_Enabled)
        painter.setPen(QPen(QColor(INDICATOR_EDGE if enabled else INDICATOR_EDGE_OFF), 1))
        if element == QStyle.PrimitiveElement.PE_IndicatorCheckBox:
            painter.drawRect(option.rect.adjusted(0, 0, -1, -1))
        else:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.drawEllipse(QRectF(option.rect).adjusted(1.5, 1.5, -1.5, -1.5))
        painter.restore()


def apply_dark(app: QApplication) -> None:
    app.setStyle(DarkStyle())
    palette = QPalette()
    for role, colour in COLOURS.items():
        palette.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6b6f78"))
    app.setPalette(palette)

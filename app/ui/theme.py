"""A dark Fusion palette that matches the charts' background."""
from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

COLOURS = {
    QPalette.ColorRole.Window: "#25262b", QPalette.ColorRole.WindowText: "#e4e6eb",
    QPalette.ColorRole.Base: "#1e1f24", QPalette.ColorRole.AlternateBase: "#2b2d33",
    QPalette.ColorRole.Text: "#e4e6eb", QPalette.ColorRole.Button: "#2f3138",
    QPalette.ColorRole.ButtonText: "#e4e6eb", QPalette.ColorRole.Highlight: "#4f8cff",
    QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.ToolTipBase: "#2f3138",
    QPalette.ColorRole.ToolTipText: "#e4e6eb", QPalette.ColorRole.PlaceholderText: "#8a8f98",
}


def apply_dark(app: QApplication) -> None:
    app.setStyle("Fusion")
    palette = QPalette()
    for role, colour in COLOURS.items():
        palette.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6b6f78"))
    app.setPalette(palette)

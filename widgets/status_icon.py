"""Small status icons drawn with QPainter (a coloured disc with a darker ring and an optional glyph), for the tray and
status labels (given a colour only)."""
from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QIcon, QPainter, QPen, QPixmap

SIZES = (16, 22, 24, 32, 48, 64)


def dot_pixmap(colour: str, size: int = 64, glyph: str = "") -> QPixmap:
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    fill = QColor(colour)
    ring = max(1.0, size / 16)
    painter.setPen(QPen(fill.darker(170), ring))
    painter.setBrush(fill)
    inset = ring / 2 + size * 0.06
    painter.drawEllipse(QRectF(inset, inset, size - 2 * inset, size - 2 * inset))
    if glyph:
        font = QFont()
        font.setBold(True)
        font.setPixelSize(max(6, int(size * 0.5)))
        painter.setFont(font)
        painter.setPen(QColor("#ffffff") if fill.lightnessF() < 0.6 else QColor("#1e1f24"))
        painter.drawText(QRectF(0, 0, size, size), Qt.AlignmentFlag.AlignCenter, glyph)
    painter.end()
    return pixmap


def dot_icon(colour: str, glyph: str = "") -> QIcon:
    icon = QIcon()
    for size in SIZES:
        icon.addPixmap(dot_pixmap(colour, size, glyph))
    return icon

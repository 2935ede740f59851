"""Small status icons drawn with QPainter (a coloured disc with a darker ring and an optional glyph), for status labels
(given a colour only), and the same disc as a state badge over an application icon's pixmaps (the tray)."""
from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QIcon, QImage, QPainter, QPen, QPixmap

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


BADGE = 0.5  # the badge's share of the icon's side


def badged_pixmap(base: QPixmap, colour: str, glyph: str = "", grey: bool = False) -> QPixmap:
    """`base` (greyed when asked) with a state badge in its bottom-right corner, ringed in white so it reads on the
    icon and on dark or light panels alike."""
    size = base.width()
    image = base.toImage().convertToFormat(QImage.Format.Format_ARGB32)
    if grey:
        image = _greyed(image)
    pixmap = QPixmap.fromImage(image)
    side = max(6, round(size * BADGE))
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    halo = max(1.0, size / 24)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor("#ffffff"))
    corner = size - side
    painter.drawEllipse(QRectF(corner - halo + side * 0.06, corner - halo + side * 0.06,
                               side * 0.88 + 2 * halo, side * 0.88 + 2 * halo))
    painter.drawPixmap(corner, corner, dot_pixmap(colour, side, glyph))
    painter.end()
    return pixmap


def _greyed(image: QImage) -> QImage:
    """The image in grey, a little faded (alpha kept): an app that is not running. Whole-image operations only (no
    per-pixel calls from Python)."""
    grey = image.convertToFormat(QImage.Format.Format_Grayscale8).convertToFormat(QImage.Format.Format_ARGB32)
    grey.setAlphaChannel(image.convertToFormat(QImage.Format.Format_Alpha8))
    grey = grey.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)
    painter = QPainter(grey)
    painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceAtop)
    painter.fillRect(grey.rect(), QColor(150, 150, 150, 110))
    painter.end()
    return grey


def badged_icon(bases: list[QPixmap], colour: str, glyph: str = "", grey: bool = False) -> QIcon:
    """An icon of every size in `bases`, each badged (see badged_pixmap); no base: the plain disc."""
    if not bases:
        return dot_icon(colour, glyph)
    icon = QIcon()
    for base in bases:
        icon.addPixmap(badged_pixmap(base, colour, glyph, grey))
    return icon

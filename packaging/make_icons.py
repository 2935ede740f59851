"""Render resources/nightschool.svg to the PNG icon sizes the desktop install copies (run once; the PNGs are committed)."""
from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

ROOT = Path(__file__).resolve().parents[1]
SVG = ROOT / "resources" / "nightschool.svg"
OUT = ROOT / "resources" / "icons"
SIZES = (16, 24, 32, 48, 64, 128, 256)  # the same list as app.core.desktop.entries.PNG_SIZES


def render(renderer: QSvgRenderer, size: int) -> QImage:
    """The SVG drawn on a transparent size x size image, antialiased."""
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    return image


def main() -> int:
    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        print(f"error: {SVG} is not an SVG Qt can read", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    for size in SIZES:
        path = OUT / f"{size}.png"
        if not render(renderer, size).save(str(path), "PNG"):
            print(f"error: could not write {path}", file=sys.stderr)
            return 1
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The colours the views share, named once: the widgets, the app's theme and its panels import them from here."""
from __future__ import annotations

BACKGROUND = "#1e1f24"  # the charts' background; the theme's Base
DIM = "#9aa0aa"  # secondary text: hints, notes, axis labels
FAINT = "#8a8f98"  # fainter still: placeholders, chart notices, finished rows, transcript meta, box outlines
GOOD, WARN, BAD = "#2ecc71", "#ff9f43", "#ff6b6b"

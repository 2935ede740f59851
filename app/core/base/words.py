"""Time left in words, the same in the window and the terminal ("about 3 min left")."""
from __future__ import annotations


def eta_words(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return ""
    seconds = int(seconds)
    if seconds < 60:
        return f"about {seconds} s left"
    if seconds < 3600:
        return f"about {seconds // 60} min left"
    return f"about {seconds // 3600} h {seconds % 3600 // 60:02d} min left"

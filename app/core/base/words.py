"""Words the window and the terminal share: time left ("about 3 min left"), counts ("12,400")."""
from __future__ import annotations


def duration_words(seconds: float | None) -> str:
    """A length of time as a person says it: "40 s", "12 min", "3 h 05 min" ("" for None)."""
    if seconds is None or seconds < 0:
        return ""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def eta_words(seconds: float | None) -> str:
    """Time left as a progress line says it: "about 12 min left" ("" for None)."""
    took = duration_words(seconds)
    return f"about {took} left" if took else ""


def grouped(n, none: str = "-") -> str:
    """A count with its thousands marked the one way the app writes them, window and terminal: 12400 → '12,400'
    (`none` for None)."""
    return none if n is None else f"{int(n):,}"

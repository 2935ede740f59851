"""Session-level train/val/test by a stable hash: a session (with its sub-agents) lands in the same split every build."""
from __future__ import annotations

import hashlib

SPLITS = ("train", "val", "test")


def split_of(session_id: str, val_share: float, test_share: float, heldout: frozenset[str] = frozenset()) -> str:
    """The split of a session (pass the root session's id for a sub-agent); a held-out session is always test."""
    if session_id in heldout:
        return "test"
    digest = hashlib.sha256(f"nightschool-split\0{session_id}".encode()).digest()
    point = int.from_bytes(digest[:8], "big") / 2**64
    if point < test_share:
        return "test"
    if point < test_share + val_share:
        return "val"
    return "train"

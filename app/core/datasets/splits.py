"""Session-level train/val/test: a session keeps the split an earlier build gave it; a new one gets a stable-hash
split; held-out (test) sessions stay held out for ever, and a session once trained on never becomes held out."""
from __future__ import annotations

import hashlib
from collections.abc import Mapping

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


def assign(roots: Mapping[str, str], val_share: float, test_share: float, heldout: frozenset[str],
           prior: Mapping[str, str]) -> dict[str, str]:
    """Split of each session in `roots` (session id -> its root session's id; a root maps to itself).

    Held-out sessions are test; a session an earlier build used keeps its split (`prior`: train/val of any earlier
    build wins over test); a new session follows its task (the root, else a sibling seen before), else the stable
    hash of its root with today's shares. So only new sessions ever join the held-out set."""
    group: dict[str, str] = {}
    for sid, root in sorted(roots.items()):
        if root not in group and sid in prior and sid != root:
            group[root] = prior[sid]
    out = {}
    for sid, root in roots.items():
        if sid in heldout:
            out[sid] = "test"
        elif sid in prior:
            out[sid] = prior[sid]
        elif root in heldout:
            out[sid] = "test"
        else:
            out[sid] = prior.get(root) or group.get(root) or split_of(root, val_share, test_share)
    return out

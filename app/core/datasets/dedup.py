"""Near-duplicate removal with MinHash + LSH (datasketch): of a group of near-identical sessions the earliest stays."""
from __future__ import annotations

import re
from typing import Iterable

from datasketch import MinHash, MinHashLSH

NUM_PERM = 64
SHINGLE = 5  # words per shingle
_WORD = re.compile(r"\w+")


def shingles(text: str) -> set[bytes]:
    words = _WORD.findall(text.lower())
    if len(words) <= SHINGLE:
        return {" ".join(words).encode()} if words else set()
    return {" ".join(words[i:i + SHINGLE]).encode() for i in range(len(words) - SHINGLE + 1)}


def signature(text: str) -> MinHash:
    m = MinHash(num_perm=NUM_PERM, seed=1)
    m.update_batch(list(shingles(text)))
    return m


def near_duplicates(items: Iterable[tuple[str, str]], threshold: float) -> dict[str, str]:
    """{dropped key: the kept key it duplicates} for (key, text) items given oldest first."""
    if threshold <= 0:
        return {}
    lsh = MinHashLSH(threshold=threshold, num_perm=NUM_PERM)
    sigs: dict[str, MinHash] = {}
    dropped: dict[str, str] = {}
    for key, text in items:
        sig = signature(text)
        match = next((k for k in lsh.query(sig) if sigs[k].jaccard(sig) >= threshold), None)
        if match is not None:
            dropped[key] = match
            continue
        lsh.insert(key, sig)
        sigs[key] = sig
    return dropped

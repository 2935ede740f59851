"""Generated Claude Code session lines (requests, split assistant lines, tool results of varied size) and one huge
session file written from them in pieces, for the ingest benchmarks and the big-file tests."""
from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("the function returns a value when the test passes so we need to check imports in the module first then "
         "update config path error handler parser token stream fixture database migration").split()


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _code(rng: random.Random, lines: int) -> str:
    return "\n".join(f"    {rng.choice(WORDS)}_{i} = {rng.choice(WORDS)}({rng.randint(0, 999)})  # {_prose(rng, 6)}"
                     for i in range(lines))


def session_lines(rng: random.Random, sid: str, turns: int, first_turn: int = 0,
                  parent: str | None = None) -> list[str]:
    """A realistic session: requests, split assistant lines (thinking + tool_use), tool results of varied size
    (first_turn, parent: go on with a session already written, for one big file written in pieces)."""
    out = []
    base = {"sessionId": sid, "cwd": "/home/dev/work/project-" + sid[:4], "gitBranch": "main", "version": "2.1.3",
            "userType": "external", "isSidechain": False}
    for t in range(first_turn, first_turn + turns):
        uid = f"{sid}-u{t}"
        out.append({**base, "type": "user", "uuid": uid, "parentUuid": parent, "timestamp": f"2026-11-{1 + t % 20:02d}T10:00:00.000Z",
                    "message": {"role": "user", "content": _prose(rng, rng.randint(8, 60))}})
        parent = uid
        for k in range(rng.randint(1, 4)):
            mid, call = f"msg_{sid}_{t}_{k}", f"toolu_{sid}_{t}_{k}"
            for j, block in enumerate(({"type": "thinking", "thinking": _prose(rng, rng.randint(20, 120))},
                                       {"type": "tool_use", "id": call, "name": rng.choice(["Read", "Bash", "Edit", "Grep"]),
                                        "input": {"file_path": f"/home/dev/work/src/{rng.choice(WORDS)}.py",
                                                  "command": _prose(rng, 5)}})):
                aid = f"{mid}-{j}"
                out.append({**base, "type": "assistant", "uuid": aid, "parentUuid": parent, "requestId": f"req_{mid}",
                            "timestamp": "2026-11-01T10:00:01.000Z",
                            "message": {"id": mid, "role": "assistant", "model": "claude-sonnet-4-5",
                                        "content": [block], "usage": {"input_tokens": 900, "output_tokens": 120}}})
                parent = aid
            rid = f"{sid}-r{t}-{k}"
            size = rng.choice([5, 20, 80, 400])
            out.append({**base, "type": "user", "uuid": rid, "parentUuid": parent, "timestamp": "2026-11-01T10:00:02.000Z",
                        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                                                 "content": _code(rng, size), "is_error": rng.random() < 0.05}]}})
            parent = rid
        aid = f"{sid}-a{t}"
        out.append({**base, "type": "assistant", "uuid": aid, "parentUuid": parent, "timestamp": "2026-11-01T10:00:03.000Z",
                    "message": {"id": f"msg_{aid}", "role": "assistant", "model": "claude-sonnet-4-5",
                                "content": [{"type": "text", "text": _prose(rng, rng.randint(20, 80))}]}})
        parent = aid
    return [json.dumps(r) for r in out]


def big_file(path: Path, megabytes: int, seed: int = 11) -> int:
    """One Claude Code session file of about `megabytes` (written in pieces, one chain); its size in bytes."""
    rng, sid, turn, parent = random.Random(seed), "0b16f11e-0000-4000-8000-000000000001", 0, None
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        while fh.tell() < megabytes * 1024**2:
            fh.write("\n".join(session_lines(rng, sid, 20, turn, parent)) + "\n")
            turn, parent = turn + 20, f"{sid}-a{turn + 19}"
    return path.stat().st_size

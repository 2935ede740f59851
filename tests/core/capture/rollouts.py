"""Real Codex rollouts (real-world-2) copied for the student's-work tests, their `turn_context.model` set to another
model from a given user request on: the student's served name makes a rollout of the student's own work, set from the
second request on a mixed one (a person who switched models mid-session)."""
from __future__ import annotations

import json
from pathlib import Path

from tests.core.capture.helpers import REAL

REAL2 = REAL.parent / "real-world-2"
TEACHER = REAL2 / "EdouardZemb+test-framework/.codex/sessions/2026/01/29/" \
    "rollout-2026-01-29T09-56-59-019c08f8-5a47-7a61-8993-d5882309292e.jsonl"  # 2 requests, 4 tool calls
STUDENT = REAL2 / "EdofEngland+code_butler/.codex/sessions/2025/11/24/" \
    "rollout-2025-11-24T12-46-26-019ab730-4906-7b12-8569-c53c5dde1150.jsonl"  # 1 request, 3 tool calls
MIXED = REAL2 / "yoavf+ai-sessions/examples/codex-pomodor-timer.jsonl"  # 3 requests: 8, 2 and 8 tool calls
MIXED_NAME = "rollout-2025-10-20T10-00-00-019a085e-04c1-7f81-a09e-9555f6a1fb40.jsonl"  # as Codex names its files


def rollout(source: Path, folder: Path, model: str | None = None, from_request: int = 1,
            name: str | None = None) -> Path:
    """`source` copied into `folder`, each turn_context from the `from_request`-th user request on naming `model`
    (None: as it was). Returns the copy."""
    out, requests = [], 0
    for line in source.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        payload = record.get("payload") if isinstance(record.get("payload"), dict) else {}
        if record.get("type") == "event_msg" and payload.get("type") == "user_message":
            requests += 1
        if model is not None and record.get("type") == "turn_context" and requests >= from_request:
            payload["model"] = model
        out.append(json.dumps(record))
    path = folder / (name or source.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path

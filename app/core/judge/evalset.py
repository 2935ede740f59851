"""What an evaluation runs on: the held-out set (a built dataset's test split: sessions frozen out of every training
set of that base model, or a chat JSONL file), its teacher contexts, the examples for the loss, and tool schemas."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel

from app.core.datasets.pairs import Context, teacher_contexts
from app.core.judge.report import EvalSettings
from app.core.toolcalls import schemas
from app.core.toolcalls.convention import as_text, message_calls


class EvalConfig(BaseModel):
    """One evaluation request for the engine's worker."""

    label: str = "base"
    base_model: str = "default"
    adapter: str | None = None  # a LoRA adapter or checkpoint folder; None = the base model
    adapter_sha256: str | None = None
    eval_file: str
    eval_set: str
    eval_set_sha256: str
    schema_files: list[str] = []  # teacher calls in these files (and the eval file) give the tools' schemas
    settings: EvalSettings = EvalSettings()

    @property
    def max_new_tokens(self) -> int:  # engine.mine_pairs.load_student reads it
        return self.settings.max_new_tokens

    def settings_sha256(self) -> str:
        return hashlib.sha256(self.settings.model_dump_json().encode()).hexdigest()


@dataclass
class EvalSet:
    name: str
    path: Path
    sha256: str
    base_model: str | None = None  # the model a dataset was rendered for
    schema_files: tuple[Path, ...] = ()


def read_records(path: Path) -> Iterator[dict]:
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                if isinstance(rec, dict) and isinstance(rec.get("messages"), list):
                    yield rec


def _stable(key: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def contexts(records: list[dict], settings: EvalSettings) -> list[Context]:
    """The held-out next actions: every assistant message after a user message, once, capped by a stable hash."""
    return teacher_contexts(({**r, "split": "train"} for r in records), settings.max_contexts, settings.seed)


def loss_examples(records: list[dict], settings: EvalSettings) -> list[list[dict]]:
    """Whole examples for the teacher-forced loss: capped by a stable hash of their content."""
    keyed = sorted(records, key=lambda r: _stable(json.dumps(r["messages"], sort_keys=True), settings.seed))
    return [r["messages"] for r in keyed[:settings.max_examples]]


def sample_keys(found: list[Context], settings: EvalSettings) -> set[str]:
    """The fixed sample generations: the same prompts for every model evaluated on this set with these settings."""
    return {c.key for c in sorted(found, key=lambda c: _stable(c.key, settings.seed))[:settings.samples]}


def tool_schemas(files: list[Path]) -> dict[str, dict]:
    calls = (c for f in files if Path(f).is_file() for r in read_records(Path(f)) for m in r["messages"]
             if m.get("role") == "assistant" for c in message_calls(m))
    return schemas.infer(calls)


def prompt_tail(messages: list[dict], limit: int = 1200) -> str:
    """The end of a context as text for the side-by-side view: from the last user message on."""
    start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    text = "\n\n".join(f"[{m['role']}] {as_text(m)['content']}" for m in messages[start:])
    return text if len(text) <= limit else "…" + text[-limit:]

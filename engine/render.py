"""Rendering examples exactly as the model will see them: the base model's own chat template (`apply_chat_template`,
with tools where the template supports them, else the Hermes text convention), tokens, the assistant mask, and the
DEEP template round-trip check."""
from __future__ import annotations

import hashlib
from bisect import bisect_right

from engine import chat_template

MEMO = 8  # encodings remembered (a window is counted, then rendered)


def supports_tools(template: str | None) -> bool:
    return bool(template) and "tools" in template and "tool_calls" in template


def tool_schemas(messages: list[dict]) -> list[dict]:
    """Minimal JSON schemas for the tools a conversation calls (transcripts do not record the real ones)."""
    seen: dict[str, set[str]] = {}
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            seen.setdefault(fn["name"], set()).update((fn.get("arguments") or {}).keys())
    return [{"type": "function", "function": {"name": name, "description": f"The {name} tool.",
                                              "parameters": {"type": "object",
                                                             "properties": {k: {} for k in sorted(keys)}}}}
            for name, keys in sorted(seen.items())]


class Renderer:
    """One tokenizer's rendering; `render` gives text, input_ids, assistant_masks and preview segments."""

    def __init__(self, tokenizer, label: str) -> None:
        self.tok = tokenizer
        self.label = label
        self.template = tokenizer.chat_template
        if not self.template:
            raise ValueError(f"{label} has no chat template")
        self.template_sha256 = hashlib.sha256(self.template.encode()).hexdigest()
        self.native = supports_tools(self.template)
        self.convention = "native-tools" if self.native else "hermes-text"
        self._memo: dict[str, object] = {}
        marked = chat_template.training_template(self.template)
        self.marked = marked if marked and not self.native else None

    def prepare(self, messages: list[dict]) -> tuple[list[dict], list[dict] | None]:
        if self.native:
            return messages, tool_schemas(messages) or None
        return chat_template.normalise(messages), None

    def text(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        msgs, tools = self.prepare(messages)
        return self.tok.apply_chat_template(msgs, tools=tools, tokenize=False,
                                            add_generation_prompt=add_generation_prompt)

    def encode(self, text: str):
        """Tokens and offsets of a rendered text, remembered for the last few texts (windows count a window, then
        render it: one encoding serves both)."""
        enc = self._memo.get(text)
        if enc is None:
            enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
            self._memo[text] = enc
            while len(self._memo) > MEMO:
                self._memo.pop(next(iter(self._memo)))
        return enc

    def count(self, messages: list[dict]) -> int:
        return len(self.encode(self.text(messages))["input_ids"])

    def assistant_spans(self, messages: list[dict]) -> tuple[list[tuple[int, int]], list[str]]:
        """Character spans of assistant turns by prefix difference: [len(prompt + header), end of the turn]."""
        spans, problems = [], []
        full = self.text(messages)
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            prompt = self.text(messages[:i], add_generation_prompt=True)
            upto = self.text(messages[: i + 1])
            if not upto.startswith(prompt) or not full.startswith(upto):
                problems.append(f"the template does not render message {i} incrementally (prefix mismatch)")
                continue
            spans.append((len(prompt), len(upto.rstrip("\n"))))
        return spans, problems

    def render(self, messages: list[dict]) -> dict:
        text = self.text(messages)
        enc = self.encode(text)
        ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
        spans, problems = self.assistant_spans(messages)
        starts = [s for s, _ in spans]
        mask = []
        for start, _end in offsets:
            k = bisect_right(starts, start) - 1
            mask.append(1 if k >= 0 and start < spans[k][1] else 0)
        return {"text": text, "input_ids": ids, "assistant_masks": mask, "offsets": offsets,
                "segments": _segments(text, offsets, mask), "problems": problems}

    def deep(self, messages: list[dict], rendered: dict) -> list[str]:
        """Template round-trip: the tokens decode to the text, re-tokenising gives the same ids, the mask from the
        prefix spans equals the template's own {% generation %} mask, and every assistant turn is trained."""
        problems = list(rendered.get("problems", []))
        ids, mask = rendered["input_ids"], rendered["assistant_masks"]
        decoded = self.tok.decode(ids, skip_special_tokens=False)
        if decoded != rendered["text"]:  # (when it is equal, re-tokenising it gives `ids` by construction)
            problems.append("decoding the tokens does not give back the rendered text")
            if list(self.tok(decoded, add_special_tokens=False)["input_ids"]) != ids:
                problems.append("re-tokenising the decoded text gives different tokens")
        if self.marked:
            msgs, _ = self.prepare(messages)
            out = self.tok.apply_chat_template(msgs, chat_template=self.marked, tokenize=True, return_dict=True,
                                               return_assistant_tokens_mask=True)
            if list(out["input_ids"]) != ids:
                problems.append("the training template renders different tokens than the model's template")
            elif list(out["assistant_masks"]) != mask:
                diff = sum(a != b for a, b in zip(out["assistant_masks"], mask))
                problems.append(f"assistant mask differs from the template's generation mask in {diff} tokens")
        turns = sum(1 for m in messages if m["role"] == "assistant")
        if turns and not any(mask):
            problems.append("no token is trained (the assistant turns were cut off)")
        return problems


def _segments(text: str, offsets, mask: list[int]) -> list[list]:
    """The rendered text in runs of trained (1) and masked (0) characters, for the preview (covers every character)."""
    runs: list[list] = []  # [start char, trained]
    for (start, _end), m in zip(offsets, mask):
        if not runs or runs[-1][1] != m:
            runs.append([start, m])
    if runs:
        runs[0][0] = 0
    bounds = [r[0] for r in runs[1:]] + [len(text)]
    return [[text[r[0]:end], r[1]] for r, end in zip(runs, bounds)]


def load(ref: str, models_dir, report=None) -> Renderer:
    """The renderer of a model reference (the tokenizer only; the embedded default is materialised once)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from app.core.train.modelref import check_model_ref
    from engine import loading

    if check_model_ref(ref) == "embedded" and not (Path(models_dir) / loading.EMBEDDED_DIR / "tokenizer.json").is_file():
        gguf = loading.embedded_gguf()  # the tokenizer alone: no need to materialise the whole model to build data
        return Renderer(AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name), loading.EMBEDDED_NAME)
    source, label = loading.resolve(ref, Path(models_dir), report or loading._quiet)
    return Renderer(AutoTokenizer.from_pretrained(source), label)

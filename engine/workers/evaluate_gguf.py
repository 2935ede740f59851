"""GGUF evaluation worker: `python -m engine.workers.evaluate_gguf --spec FILE` measures an exported GGUF through llama.cpp on
the held-out set the HF evaluator uses: loss from llama.cpp's logits on the very token ids the training renderer makes
(and how many examples llama.cpp tokenises the same), greedy next actions through the GGUF's embedded chat template
(under the grammar of each context's tools, as served) judged like the HF ones, the behavioural reward and the
samples. Writes report.json (runtime "gguf"), losses.jsonl and generations.jsonl like engine.workers.evaluate;
protocol envelopes on stdout, one JSON line each."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from app.core.base import protocol as P
from app.core.judge import decoding
from app.core.judge.gguf import GgufEvalConfig
from app.core.judge.reward_context import RewardContext
from engine.workers import tool_grammar
from engine.workers.envelope import Emitter, worker_main
from engine.workers.evaluate import Reuse, each, encoded, finish, held_out_cases
from engine.workers.mine_pairs import STOP_TOKENS

TOOL_END = decoding.TOOL_END.encode()
ROWS = 256  # logits rows turned into log-probabilities at once
RENDERERS: dict = {}  # (base model, models dir) -> the training renderer, loaded once per worker


class Served:
    """The GGUF as llama.cpp runs it: its vocabulary, embedded template, end-of-turn tokens and (once loaded) logits."""

    def __init__(self, path: Path, n_threads: int | None) -> None:
        from engine.workers import smoke

        self.path, self.n_threads = path, n_threads
        self.llm = smoke.load(path, n_ctx=512, vocab_only=True)
        self.quant = smoke.quant_name(self.llm)
        self.template = self.llm.metadata.get("tokenizer.chat_template") or ""
        model = self.llm._model
        eos, bos = self.llm.token_eos(), self.llm.token_bos()
        self.eos_text = model.token_get_text(eos) if eos >= 0 else ""
        self.bos_text = model.token_get_text(bos) if bos >= 0 else ""
        self.stop = {eos} | {t for t in (self._single(s) for s in STOP_TOKENS) if t is not None}
        self.stop.discard(-1)
        self._format = None

    def _single(self, text: str) -> int | None:
        ids = self.llm.tokenize(text.encode(), add_bos=False, special=True)
        return ids[0] if len(ids) == 1 else None

    def tokens(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=False, special=True)

    def prompt(self, messages: list[dict]) -> str:
        """The generation prompt through the GGUF's embedded template (what a runtime serving the file renders), with
        the tools' schemas where the template takes them, as the training renderer gives them."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        from engine import render

        if self._format is None:
            self._format = Jinja2ChatFormatter(self.template, eos_token=self.eos_text, bos_token=self.bos_text,
                                               add_generation_prompt=True)
        tools = render.tool_schemas(messages) or None if render.supports_tools(self.template) else None
        return self._format(messages=messages, tools=tools).prompt

    def load(self, n_ctx: int, logits_all: bool) -> None:
        """The full model; with logits for every position for the loss, without them for generation (the vocabulary
        projection of every prompt token is a fifth of a small model's work, and copying it out more)."""
        from engine.workers import smoke

        self.llm.close()
        threads = self.n_threads or physical_cores()
        kw = {"n_threads": threads, "n_threads_batch": self.n_threads or None}
        self.llm = smoke.load(self.path, n_ctx=n_ctx, logits_all=logits_all, n_batch=min(n_ctx, 512), **kw)
        self.reused = 0  # prompt tokens not evaluated again because the KV cache held them
        self.generated = 0  # tokens sampled (the stop token included)

    def _keep_prefix(self, ids: list[int]) -> list[int]:
        """Keep the KV cache (and the logits rows) of the tokens this sequence shares with the one evaluated before;
        the tokens still to evaluate. At least the last token is evaluated again."""
        llm = self.llm
        shared = _shared(llm._input_ids[:llm.n_tokens].tolist(), ids[:-1])
        if shared and llm._ctx.kv_cache_seq_rm(-1, shared, -1):
            llm.n_tokens = shared
            self.reused += shared
            return ids[shared:]
        llm.reset()
        return ids

    def nll(self, ids: list[int], mask: list[int]) -> tuple[float, int]:
        """Summed NLL of the masked tokens, each predicted from the tokens before it (log-softmax in float64, a block
        of rows at a time: a whole example's logits in float64 would take GBs)."""
        import numpy as np

        self.llm.eval(self._keep_prefix(ids))
        rows = [i for i in range(len(ids) - 1) if mask[i + 1]]
        total = 0.0
        for start in range(0, len(rows), ROWS):
            part = rows[start:start + ROWS]
            logits = self.llm.scores[part].astype(np.float64)
            top = logits.max(axis=1)
            logz = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
            total += float((logz - logits[np.arange(len(part)), [ids[i + 1] for i in part]]).sum())
        return total, len(rows)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, repeat_penalty: float = 1.0,
                 tools: dict | None = None) -> tuple[str, bool]:
        """Greedy, decoded as served (decoding.py): under the grammar of `tools` ({name: schema}; none: free), up to an
        end-of-turn token, the first complete tool call or max_new_tokens. (text, finished)."""
        out, finished = bytearray(), False
        held = self.llm._input_ids[:self.llm.n_tokens].tolist()
        self.reused += _shared(held, prompt_ids[:-1])  # llama-cpp-python's generate keeps the shared prefix itself
        grammar = tool_grammar.for_tools(self.llm, tools) if tools else None
        answer = tool_grammar.generate(self.llm, prompt_ids, grammar, reset=True, **decoding.llama_kwargs(repeat_penalty))
        for n, token in enumerate(answer):
            self.generated += 1
            if token in self.stop:
                finished = True
                break
            out += self.llm.detokenize([token])
            if TOOL_END in out:
                finished = True
                break
            if n + 1 >= max_new_tokens:
                break
        text, closed = decoding.end_at_tool_call(out.decode("utf-8", errors="replace").strip())
        return text, finished or closed

    def close(self) -> None:
        self.llm.close()


def physical_cores() -> int:
    """Generation threads when none are asked for: the physical cores this process may run on (llama-cpp-python's own
    default is half the logical CPUs, which on a 2-core machine without hyperthreads is one thread: generation was
    1.2-1.3x faster with two here)."""
    import psutil

    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(psutil.cpu_count(logical=False) or 1, allowed))


def _shared(a: list[int], b: list[int]) -> int:
    """How many tokens two sequences share from their start."""
    return len(os.path.commonprefix([a, b]))


def prefix_order(seqs: list[list[int]]) -> list[int]:
    """Indices in token order: sequences that share a beginning (the same session's contexts, the same system prompt
    and tools) come one after another, so each evaluates only what it does not share with the one before."""
    return sorted(range(len(seqs)), key=lambda i: seqs[i])


def losses_of(served: Served, rendered: list[dict], progress) -> tuple[list[tuple[float, int]], int]:
    """(summed NLL, tokens) per example on the training renderer's ids, and how many llama.cpp tokenises the same."""
    matched, out = 0, [(0.0, 0)] * len(rendered)
    for n, i in enumerate(prefix_order([r["ids"] for r in rendered])):
        r = rendered[i]
        matched += served.tokens(r["text"]) == r["full_ids"]
        if sum(r["mask"][1:]):
            out[i] = served.nll(r["ids"], r["mask"])
        progress("loss", n + 1, len(rendered))
    return out, matched


def rendered_examples(renderer, examples: list[list[dict]]) -> list[dict]:
    """The training renderer's text, ids (whole and as the loss sees them) and assistant mask of each example."""
    shim = SimpleNamespace(renderer=renderer)
    out = []
    for messages in examples:
        full = renderer.render(messages)
        ids, mask = encoded(shim, messages)
        out.append({"text": full["text"], "full_ids": list(full["input_ids"]), "ids": ids, "mask": mask})
    return out


def context_tools(found, tool_schemas: dict, settings) -> list[dict | None]:
    """The tools each next action decodes under (its system message's tools with the held-out set's schemas, as a
    request would name them); None each where the settings have the grammar off."""
    if not settings.grammar:
        return [None] * len(found)
    return [decoding.context_tools(RewardContext.from_messages(c.messages, c.teacher).tools, tool_schemas)
            for c in found]


def measure(served: Served, renderer, found, rendered: list[dict], settings, out: Emitter,
            tool_schemas: dict | None = None) -> dict:
    """Loss, tokenisation and template checks, and the greedy next actions through the GGUF."""
    prompts = [served.prompt(c.messages) for c in found]
    matched = sum(p == renderer.text(c.messages, add_generation_prompt=True) for p, c in zip(prompts, found))
    prompt_ids = [served.tokens(p) for p in prompts]
    longest = max([len(r["ids"]) for r in rendered] + [len(p) + settings.max_new_tokens for p in prompt_ids])
    out.emit(P.Log(message=f"{len(rendered)} examples for the loss, {len(found)} next actions on "
                           f"{served.path.name} ({served.quant}); {matched} of {len(found)} prompts render through "
                           "its template as in training"))
    served.load(max(len(r["ids"]) for r in rendered) + 8 if rendered else 64, logits_all=True)
    started = time.monotonic()
    per_example, tokenization_matched = losses_of(served, rendered, out.progress)
    out.emit(P.Log(message=f"llama.cpp tokenises {tokenization_matched} of {len(rendered)} rendered examples exactly "
                           "as the HF tokenizer (the loss is measured on the HF token ids either way); loss in "
                           f"{time.monotonic() - started:.1f} s, {served.reused} tokens reused from the cache"))
    served.load(longest + 8, logits_all=False)
    started = time.monotonic()
    texts: list = [None] * len(prompt_ids)
    tools = context_tools(found, tool_schemas or {}, settings)
    for n, i in enumerate(prefix_order(prompt_ids)):
        texts[i] = served.generate(prompt_ids[i], settings.max_new_tokens, settings.repeat_penalty, tools[i])
        out.progress("generate", n + 1, len(prompt_ids))
    took = time.monotonic() - started
    out.emit(P.Log(message=f"{len(prompt_ids)} next actions generated in {took:.1f} s ({served.generated} tokens, "
                           f"{sum(t is not None for t in tools)} under a tool-call grammar), {served.reused} prompt "
                           "tokens reused from the cache"))
    return {"per_example": per_example, "texts": texts, "tokenization_matched": tokenization_matched,
            "prompts_matched": matched}


def run(spec: dict, out: Emitter) -> int:
    from engine import render
    from engine.workers import smoke

    config = GgufEvalConfig.model_validate(spec["config"])
    settings = config.settings
    started = time.monotonic()
    cases = held_out_cases(config, out)
    if cases is None:
        return 1
    reuse = Reuse(config, *cases[:2], out)
    if reuse.nothing_new:  # the grown set's new records brought no next action or loss example of its draw
        return finish(spec, out, config, cases, *reuse.merged([], []), started, "cpu (llama.cpp)", runtime="gguf",
                      **reuse.counts())
    gguf = Path(config.gguf) if config.gguf else converted(config, spec, out)
    smoke.check_file(gguf)  # not a GGUF: refused before the tokenizer loads
    key = (config.base_model, spec["models_dir"])
    renderer = RENDERERS.get(key) or RENDERERS.setdefault(key, render.load(*key))  # a judgement's models share one
    rendered = rendered_examples(renderer, reuse.examples)
    served = Served(gguf, config.n_threads)
    try:
        got = measure(served, renderer, reuse.found, rendered, settings, out, cases[2])
    finally:
        served.close()
    return finish(spec, out, config, cases, *reuse.merged(got["per_example"], got["texts"]), started,
                  "cpu (llama.cpp)", runtime="gguf", quant=served.quant, gguf_sha256=config.gguf_sha256,
                  tokenization_matched=got["tokenization_matched"], prompts_matched=got["prompts_matched"],
                  **reuse.counts())


def converted(config: GgufEvalConfig, spec: dict, out: Emitter) -> Path:
    """No file named: the model itself (base + adapter, merged) as an f16 GGUF with the shipping template — from the
    cache when an earlier evaluation or export converted the same model, else converted now and kept there (the export
    of the same checkpoint quantizes that file): judging through llama.cpp, the served form, unquantized."""
    from app.core.ship.config import ExportConfig
    from engine import loading
    from engine.workers import gguf_cache, llama_tools
    from engine.workers.export import merged

    started = time.monotonic()
    base_dir = loading.resolve(config.base_model, Path(spec["models_dir"]))[0]
    digest = gguf_cache.key(base_dir, config.adapter, config.gguf_name, llama_tools.converter())
    if (cached := gguf_cache.get(digest)) is not None:
        out.emit(P.Log(message=f"the f16 GGUF of {config.label} comes from the cache (converted once before)"))
        return cached

    def convert(folder: Path) -> Path:
        export = ExportConfig(label=config.label, base_model=config.base_model, adapter=config.adapter,
                              quants=["f16"], lora=False, smoke=False)
        merged(export, Path(spec["models_dir"]), folder / "hf", out)
        return llama_tools.convert(folder / "hf", folder / "model.f16.gguf", folder / "convert.log", config.gguf_name)

    path = gguf_cache.put(digest, convert)
    out.emit(P.Log(message=f"converted {config.label} to an f16 GGUF for llama.cpp in "
                           f"{time.monotonic() - started:.1f} s (kept for its export and later evaluations)"))
    return path


def main(argv: list[str] | None = None) -> int:
    return worker_main(argv, "engine.workers.evaluate_gguf", "a GGUF evaluation", each(run))


if __name__ == "__main__":
    sys.exit(main())

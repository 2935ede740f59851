"""Evaluation worker: `python -m engine.workers.evaluate --spec FILE` measures one model (the base, or base + a LoRA adapter
or checkpoint) on a held-out set: teacher-forced loss / perplexity on assistant tokens, next-action agreement and
tool-call validity of greedy generations at the teacher's contexts, the behavioural reward (the training reward's
functions), and a fixed set of sample generations. Writes report.json + the per-example evidence (losses.jsonl,
generations.jsonl: the format is in app/core/judge/report.py) and prints protocol envelopes (progress, log, evaluated,
error) on stdout, one JSON line each."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from app.core.base import protocol as P
from app.core.base.fingerprint import sha256_file
from app.core.judge import decoding, evalset, nextaction
from app.core.judge.evalset import EvalConfig
from app.core.judge.report import (GENERATIONS, LOSSES, EvalReport, Sample, example_key, loss_rows, metrics_from,
                                   read_rows, write_rows)
from app.core.judge.reward_context import RewardContext
from app.core.judge.rewards import score
from app.core.toolcalls.convention import as_text
from engine.workers.mine_pairs import load_student
from engine.workers.envelope import Emitter, worker_main

LOSS_BATCH = 4
GEN_BATCH = 8
MAX_TOKENS = 2048  # longer examples are cut (from the left, keeping the latest turns) for the loss


def encoded(student, messages: list[dict]) -> tuple[list[int], list[int]]:
    """Tokens and assistant mask as the model sees them (the latest MAX_TOKENS)."""
    rendered = student.renderer.render(messages)
    ids, mask = rendered["input_ids"], rendered["assistant_masks"]
    return ids[-MAX_TOKENS:], mask[-MAX_TOKENS:]


def teacher_forced(student, examples: list[list[dict]], progress) -> list[tuple[float, int]]:
    """(summed NLL, number of assistant tokens) of each example: every assistant token predicted from the tokens
    before it ((0.0, 0) for an example without one)."""
    torch = student.torch
    encoded_examples = [encoded(student, m) for m in examples]
    usable = [i for i, e in enumerate(encoded_examples) if sum(e[1][1:])]
    out = [(0.0, 0)] * len(examples)
    pad = student.tok.pad_token_id or 0
    for start in range(0, len(usable), LOSS_BATCH):
        batch = [encoded_examples[i] for i in usable[start:start + LOSS_BATCH]]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        attn = torch.zeros((len(batch), width), dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        for row, (tokens, mask) in enumerate(batch):
            n = len(tokens)
            ids[row, :n], attn[row, :n] = torch.tensor(tokens), 1
            labels[row, :n] = torch.tensor([t if m else -100 for t, m in zip(tokens, mask)])
        with torch.inference_mode():
            logits = student.model(input_ids=ids.to(student.device), attention_mask=attn.to(student.device)).logits
            shift, target = logits[:, :-1].float(), labels[:, 1:].to(student.device)
            losses = torch.nn.functional.cross_entropy(shift.reshape(-1, shift.shape[-1]), target.reshape(-1),
                                                       ignore_index=-100, reduction="none").view(target.shape)
        for i, nll, count in zip(usable[start:start + LOSS_BATCH], losses.sum(dim=1).tolist(),
                                 (target != -100).sum(dim=1).tolist()):
            out[i] = (float(nll), int(count))
        progress("loss", min(start + LOSS_BATCH, len(usable)), len(usable))
    return out


class RecentPenalty:
    """llama.cpp's repeat penalty in transformers (decoding.py): a token among the last `last_n` generated ones has
    its logit divided by the penalty (multiplied when negative); the prompt is not counted, as in llama.cpp."""

    def __init__(self, torch, penalty: float, prompt_width: int, last_n: int = decoding.PENALTY_LAST_N) -> None:
        self.torch, self.penalty, self.width, self.last_n = torch, penalty, prompt_width, last_n

    def __call__(self, input_ids, scores):
        recent = input_ids[:, self.width:][:, -self.last_n:]
        if self.penalty == 1.0 or recent.shape[1] == 0:
            return scores
        picked = self.torch.gather(scores, 1, recent)
        picked = self.torch.where(picked > 0, picked / self.penalty, picked * self.penalty)
        return scores.scatter(1, recent, picked)


def generate(student, contexts, max_new_tokens: int, progress, repeat_penalty: float = 1.0) -> list[tuple[str, bool]]:
    """Greedy next actions, a batch at a time (left padding), decoded as served (decoding.py); each stops at the end of
    its turn or its first complete tool call. (text, finished: it stopped by itself rather than at max_new_tokens)."""
    from transformers import LogitsProcessorList

    torch, tok = student.torch, student.tok
    tok.padding_side = "left"
    out: list[tuple[str, bool]] = []
    for start in range(0, len(contexts), GEN_BATCH):
        prompts = [student.prompt(c.messages) for c in contexts[start:start + GEN_BATCH]]
        enc = tok(prompts, add_special_tokens=False, return_tensors="pt", padding=True).to(student.device)
        width = enc["input_ids"].shape[1]
        with torch.inference_mode():
            gen = student.model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                                         eos_token_id=sorted(student.stop), pad_token_id=tok.pad_token_id,
                                         stop_strings=[decoding.TOOL_END], tokenizer=tok,
                                         logits_processor=LogitsProcessorList(
                                             [RecentPenalty(torch, repeat_penalty, width)]))
        for row in gen[:, width:].tolist():
            cut = next((i for i, t in enumerate(row) if t in student.stop), None)
            text, closed = decoding.end_at_tool_call(tok.decode(row[:cut], skip_special_tokens=True).strip())
            out.append((text, cut is not None or closed))
        progress("generate", len(out), len(contexts))
    return out


def judged_rows(found, texts: list[tuple[str, bool]], schemas: dict, settings) -> tuple[list, list, list, list]:
    """(judged, rewards, generations rows, samples) of the next actions: one way for both evaluators."""
    judged, rewards, rows, samples = [], [], [], []
    keep = evalset.sample_keys(found, settings)
    for ctx, (text, finished) in zip(found, texts):
        reward_ctx = RewardContext.from_messages(ctx.messages, ctx.teacher)
        j = nextaction.judge(ctx.teacher, text, reward_ctx.tools, schemas, finished)
        judged.append(j)
        rewards.append(score(text, reward_ctx).total)
        row = {"key": ctx.key, "session_id": ctx.session_id, "turn": ctx.turn,
               "prompt": evalset.prompt_tail(ctx.messages), "teacher": as_text(ctx.teacher)["content"],
               "student": text, "outcome": j.outcome}
        rows.append({**row, "finished": finished, "why": j.why, "reward": rewards[-1], "attempted": j.attempted,
                     "valid": j.valid, "reward_context": reward_ctx.to_row()})  # the teacher's action is scored too
        if ctx.key in keep:
            samples.append(Sample(**row))
    return judged, rewards, rows, samples


def write_outputs(spec: dict, out: Emitter, report: EvalReport, losses: list[dict], rows: list[dict]) -> int:
    """report.json, losses.jsonl and generations.jsonl in the spec's folder, then the `evaluated` envelope."""
    folder = Path(spec["out"])
    folder.mkdir(parents=True, exist_ok=True)
    write_rows(folder / LOSSES, losses)
    write_rows(folder / GENERATIONS, rows)
    path = report.write(folder)
    out.emit(P.Evaluated(label=report.label, path=str(folder), report_sha256=sha256_file(path),
                         metrics=report.metrics, contexts=report.contexts))
    return 0


def held_out_cases(config, out: Emitter) -> tuple[list, list, dict, list] | None:
    """(next-action contexts, loss examples, tool schemas, the loss examples' sessions) of the config's held-out
    set; None (and an error envelope) when it has nothing to evaluate on. Both evaluators see the same cases."""
    settings = config.settings
    records = list(evalset.read_records(Path(config.eval_file)))
    aside = frozenset(config.set_aside)  # blind-test pairs were made of them: no draw takes them (evalset.set_aside)
    found = evalset.contexts(records, settings, aside)
    chosen = evalset.loss_records(records, settings, aside)
    examples = [r["messages"] for r in chosen]
    if not found and aside and evalset.contexts(records, settings):
        out.emit(P.Error(message=f"the held-out set {config.eval_set} has nothing left to evaluate on",
                         why=f"each of its next actions is set aside: blind-test pairs were made of {len(aside)} "
                             "context(s) of it, and a model may have trained on them",
                         fix="hold out more sessions: capture more work, then build a dataset (nightschool dataset "
                             "build)"))
        return None
    if not found:
        out.emit(P.Error(message=f"the held-out set {config.eval_set} has nothing to evaluate on",
                         why="no example has an assistant message after a user message",
                         fix="build a dataset with a test split (nightschool dataset build) or pass another file"))
        return None
    schemas = evalset.tool_schemas([Path(f) for f in [*config.schema_files, config.eval_file]])
    sessions = {c.session_id for c in found}
    if aside:
        out.emit(P.Log(message=f"{len(aside)} held-out context(s) set aside, as blind-test pairs were made of them: "
                               "neither they nor near-identical ones are next actions or in loss examples here"))
    out.emit(P.Log(message=f"{len(examples)} examples for the loss, {len(found)} next actions from "
                           f"{len(sessions)} session(s) of {config.eval_set}; {len(schemas)} tool schema(s) inferred"))
    return found, examples, schemas, [str(r.get("session_id") or "") for r in chosen]


class Reuse:
    """What an earlier evaluation of the same model and settings measured (EvalConfig.reuse: the set has grown since)
    on the next actions and loss examples still in the set, by key; the rest is measured now and `merged` in order."""

    def __init__(self, config, found: list, examples: list[list[dict]], out: Emitter) -> None:
        folder = Path(config.reuse) if config.reuse else None
        gens = {r["key"]: (r["student"], r["finished"]) for r in read_rows(folder / GENERATIONS)
                if "finished" in r} if folder else {}
        losses = {r["key"].partition("~")[0]: (r["nll"], r["tokens"]) for r in read_rows(folder / LOSSES)} if folder else {}
        self.texts = {i: gens[c.key] for i, c in enumerate(found) if c.key in gens}
        self.losses = {i: losses[k] for i, m in enumerate(examples) if (k := example_key(m)) in losses}
        self.found = [c for i, c in enumerate(found) if i not in self.texts]  # to generate now
        self.examples = [m for i, m in enumerate(examples) if i not in self.losses]  # to measure now
        if folder:
            out.emit(P.Log(message=f"{len(self.texts)} of {len(found)} next actions and {len(self.losses)} of "
                                   f"{len(examples)} loss examples come from this model's evaluation before the set grew "
                                   "(same settings); the rest is measured now"))

    @property
    def nothing_new(self) -> bool:
        return not self.found and not self.examples

    def merged(self, per_example: list, texts: list) -> tuple[list, list]:
        """(loss of every example, answer of every next action) in the set's order: reused or measured now."""
        def fill(known: dict, new: list, n: int) -> list:
            it = iter(new)
            return [known[i] if i in known else next(it) for i in range(n)]
        return (fill(self.losses, per_example, len(self.losses) + len(self.examples)),
                fill(self.texts, texts, len(self.texts) + len(self.found)))

    def counts(self) -> dict:
        return {"reused_contexts": len(self.texts), "reused_examples": len(self.losses)}


def run(spec: dict, out: Emitter) -> int:
    config = EvalConfig.model_validate(spec["config"])
    started = time.monotonic()
    cases = held_out_cases(config, out)
    if cases is None:
        return 1
    reuse = Reuse(config, *cases[:2], out)
    per_example, texts, device = [], [], "cpu"
    if not reuse.nothing_new:
        student = load_student(config, spec["models_dir"], out)
        per_example = teacher_forced(student, reuse.examples, out.progress)
        texts = generate(student, reuse.found, config.settings.max_new_tokens, out.progress,
                         config.settings.repeat_penalty)
        device = student.device
    return finish(spec, out, config, cases, *reuse.merged(per_example, texts), started, device, **reuse.counts())


def finish(spec: dict, out: Emitter, config, cases: tuple[list, list, dict, list], per_example: list[tuple[float, int]],
           texts: list[tuple[str, bool]], started: float, device: str, **extra) -> int:
    """Judge the generated next actions, assemble the report (`extra`: the GGUF evaluator's fields) and write it
    with its per-example files: one way for both evaluators."""
    found, examples, schemas, sessions = cases
    losses = loss_rows(examples, per_example, sessions)
    nll, tokens = sum(r["nll"] for r in losses), sum(r["tokens"] for r in losses)
    judged, rewards, rows, samples = judged_rows(found, texts, schemas, config.settings)
    metrics, outcomes, attempted, valid = metrics_from(nll, tokens, judged, rewards)
    report = EvalReport(label=config.label, base_model=config.base_model, adapter=config.adapter,
                        adapter_sha256=config.adapter_sha256, eval_set=config.eval_set,
                        eval_set_sha256=config.eval_set_sha256, examples=len(examples), contexts=len(found),
                        metrics=metrics, outcomes=outcomes, tokens=tokens, calls_attempted=attempted,
                        calls_valid=valid, samples=samples, settings=config.settings, device=device,
                        set_aside=len(config.set_aside),
                        elapsed_s=round(time.monotonic() - started, 2), **extra)
    return write_outputs(spec, out, report, losses, rows)


def each(run_one):
    """A worker's entry that evaluates every config of the spec in turn (`configs`; or the one `config`), each into
    its own folder with its own `evaluated` envelope: one process, one set of imports for a judgement's models. The
    first failure ends it (the caller keeps the ones that finished)."""
    def run_all(spec: dict, out: Emitter) -> int:
        configs = spec.get("configs") or [spec["config"]]
        for n, config in enumerate(configs):
            folder = Path(spec["out"]) / str(n) if "configs" in spec else Path(spec["out"])
            if code := run_one({**spec, "config": config, "out": str(folder)}, out):
                return code
        return 0
    return run_all


def main(argv: list[str] | None = None) -> int:
    return worker_main(argv, "engine.workers.evaluate", "an evaluation", each(run))


if __name__ == "__main__":
    sys.exit(main())

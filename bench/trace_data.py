"""Skewed-length agent-trace examples for the training benches (generated sessions cut at an assistant turn to a
Pareto target length; optionally many short chats) and their length statistics: padding waste, packed rows."""
from __future__ import annotations

import random
import statistics
from types import SimpleNamespace

# --- skewed-length agent traces ---------------------------------------------------------------------------------------


def _conversation(gen, seed: int) -> list[dict]:
    """One generated Claude Code session as chat messages (system, user, assistant with tool_calls, tool results),
    converted the way a dataset build converts stored sessions."""
    from app.core.capture.rows import _message_rows
    from app.core.datasets.convert import conversation

    sess = gen.session(seed, f"s{seed:08x}", 1.78e9 + seed)
    rows = [SimpleNamespace(**r) for r in _message_rows("sid", sess) if r["branch"] == 0]
    info = SimpleNamespace(id=f"s{seed}", parent_id=None, started_at=sess.started_at)
    return conversation(info, rows, max_tool_output=1200).messages


def trace_records(n: int, tokenizer, max_length: int, seed: int = 11, alpha: float = 1.1,
                  short_share: float = 0.0) -> tuple[list[dict], list[int]]:
    """n chat examples cut from generated agent sessions at an assistant message, with a long-tailed length: each
    example's target length is drawn from a Pareto(alpha) above the shortest possible example (system + request +
    first assistant message), capped at max_length; the longest prefix of a session within the target is kept.
    With short_share > 0, that share of the examples are short chats instead (the first sentence of a session's
    request and of its final answer, no tools): many short, few long. Returns (records, token lengths as the trainer renders them)."""
    from bench.synthetic_sessions import Gen
    from engine.chat_template import normalise

    rng, gen = random.Random(seed), Gen()

    def length(messages: list[dict]) -> int:
        return len(tokenizer.apply_chat_template(normalise(messages), tokenize=True, return_dict=False))

    records, lengths = [], []
    while len(records) < n:
        messages = _conversation(gen, rng.getrandbits(40))
        ends = [i + 1 for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not ends:
            continue
        if rng.random() < short_share:
            request = next(m for m in messages if m["role"] == "user")["content"]
            answer = messages[ends[-1] - 1]
            if answer.get("tool_calls"):
                continue
            chat = [{"role": "user", "content": _first_sentence(request)},
                    {"role": "assistant", "content": _first_sentence(answer["content"])}]
            records.append({"messages": chat})
            lengths.append(length(chat))
            continue
        shortest = length(messages[:ends[0]])
        if shortest > max_length:
            continue
        target = min(max_length, int(shortest * rng.paretovariate(alpha)))
        best = ends[0]
        for end in ends[1:]:  # prefix lengths grow with `end`: stop at the first that does not fit
            if length(messages[:end]) > target:
                break
            best = end
        records.append({"messages": messages[:best]})
        lengths.append(length(messages[:best]))
    return records, lengths


def _first_sentence(text: str) -> str:
    head = text.split(". ", 1)[0].strip()
    return head if head.endswith(".") else head + "."


def pct(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def padding_efficiency(lengths: list[int], batch: int, shuffles: int = 200, seed: int = 0) -> float:
    """Useful / computed tokens when random batches are padded to their longest example (the trainer shuffles)."""
    rng, useful, padded = random.Random(seed), 0, 0
    for _ in range(shuffles):
        order = lengths[:]
        rng.shuffle(order)
        for i in range(0, len(order), batch):
            chunk = order[i:i + batch]
            useful += sum(chunk)
            padded += max(chunk) * len(chunk)
    return useful / padded


def packed_rows(lengths: list[int], max_length: int) -> int:
    """How many rows TRL's BFD packing makes of these examples."""
    from datasets import Dataset
    from trl.data_utils import pack_dataset

    data = Dataset.from_dict({"input_ids": [[1] * n for n in lengths]})
    return len(pack_dataset(data, max_length, "bfd"))


def describe_lengths(lengths: list[int], max_length: int) -> list[str]:
    top = sorted(lengths, reverse=True)[:max(1, len(lengths) // 10)]
    return [f"tokens per example: min {min(lengths)}, p10 {pct(lengths, 10)}, p50 {pct(lengths, 50)}, "
            f"p90 {pct(lengths, 90)}, p99 {pct(lengths, 99)}, max {max(lengths)} (max_length {max_length}); "
            f"mean {statistics.mean(lengths):.0f}",
            f"skew: mean / median {statistics.mean(lengths) / pct(lengths, 50):.2f}; the longest 10 % of examples "
            f"hold {sum(top) / sum(lengths):.0%} of the tokens; {sum(n <= 2 * pct(lengths, 50) for n in lengths)} "
            f"of {len(lengths)} examples are at most twice the median"]

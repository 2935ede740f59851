"""Repetition loops inside a tool call's arguments: a student whose next token slightly prefers repeating a path
segment over closing the call writes `go/go/go/…` until the token limit, an unclosed tag the judge counts invalid
(validity drops below the base's); decoded as served — the repetition penalty over the last generated tokens
(app/core/judge/decoding.py, transformers' mirror of llama.cpp's) — the same student closes its call and its validity
is the base's. The looping student is a stand-in (a fixed table of next-token logits: the rule in isolation, in
milliseconds), named as such; the penalty, the stop at the closing tag and the judge are the real ones. The same with a
student really trained and judged by the evaluation worker: test_validity_loops_trained.py."""
from __future__ import annotations

import pytest

from app.core.judge import decoding
from app.core.judge.nextaction import judge
from app.core.judge.report import metrics_from
from engine.workers.evaluate import RecentPenalty

torch = pytest.importorskip("torch")
OPEN, LOOP, CLOSE, EOS = 0, 1, 2, 3
PIECES = {OPEN: '<tool_call>{"name": "Bash", "arguments": {"command": "cd ', LOOP: "go/", CLOSE: '"}}</tool_call>',
          EOS: ""}
TEACHER = {"role": "assistant", "content": "",
           "tool_calls": [{"id": "c1", "type": "function",
                           "function": {"name": "Bash", "arguments": {"command": "cd go/src"}}}]}


def looping_student(ids: torch.Tensor) -> torch.Tensor:
    """Stand-in for a student that learned long repetitive arguments: after the opening it prefers one more `go/` to
    closing by a small margin (2.0 against 1.9), after the close it ends its turn."""
    last = int(ids[0, -1])
    logits = torch.full((1, 4), -5.0)
    if last in (OPEN, LOOP):
        logits[0, LOOP], logits[0, CLOSE] = 2.0, 1.9
    else:
        logits[0, EOS] = 3.0
    return logits


def decode(repeat_penalty: float, max_new_tokens: int = 40) -> tuple[str, bool]:
    """Greedy as the evaluators decode (the penalty as a logits processor, stop at the end of turn or the closing
    tag): (text, finished)."""
    prompt = torch.tensor([[EOS]])  # the prompt is not counted by the penalty (llama.cpp counts generated tokens)
    ids, penalty = prompt.clone(), RecentPenalty(torch, repeat_penalty, prompt.shape[1])
    first = True
    for _ in range(max_new_tokens):
        token = OPEN if first else int(penalty(ids, looping_student(ids)).argmax())
        first = False
        if token == EOS:
            return "".join(PIECES[int(t)] for t in ids[0, 1:]), True
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
        text, closed = decoding.end_at_tool_call("".join(PIECES[int(t)] for t in ids[0, 1:]))
        if closed:
            return text, True
    return "".join(PIECES[int(t)] for t in ids[0, 1:]), False


def validity(answers: list[tuple[str, bool]]) -> float | None:
    judged = [judge(TEACHER, text, {"Bash"}, {}, finished) for text, finished in answers]
    return metrics_from(1.0, 1, judged, [0.0] * len(judged))[0]["validity"]


def test_the_repetition_penalty_closes_a_looping_argument():
    base = [('<tool_call>{"name": "Bash", "arguments": {"command": "cd go/src"}}</tool_call>', True)] * 4
    looped = [decode(repeat_penalty=1.0)] * 4  # what judging decoded before: greedy, no penalty
    text, finished = looped[0]
    assert not finished and text.count("go/") > 30 and decoding.TOOL_END not in text
    assert validity(looped) == 0.0 < validity(base) == 1.0  # the drop: every answer an unclosed tag
    fixed = [decode(repeat_penalty=decoding.REPEAT_PENALTY)] * 4  # decoded as served
    text, finished = fixed[0]
    assert finished and text.endswith(decoding.TOOL_END) and text.count("go/") == 1
    assert validity(fixed) >= validity(base)


def test_the_penalty_counts_generated_tokens_only_and_both_signs():
    """llama.cpp's rule: a recent token's logit is divided by the penalty when positive, multiplied when negative;
    tokens of the prompt and tokens further back than the window are not touched."""
    scores = torch.tensor([[2.0, -2.0, 2.0, 2.0]])
    ids = torch.tensor([[2, 0, 1] + [3] * 70])  # prompt: token 2; generated: 0, 1, then 70 times token 3
    got = RecentPenalty(torch, 2.0, prompt_width=1, last_n=decoding.PENALTY_LAST_N)(ids, scores.clone())
    assert got.tolist() == [[2.0, -2.0, 2.0, 1.0]]  # 0 and 1 fell out of the last 64; 2 is the prompt's
    got = RecentPenalty(torch, 2.0, prompt_width=1, last_n=3)(torch.tensor([[2, 0, 1]]), scores.clone())
    assert got.tolist() == [[1.0, -4.0, 2.0, 2.0]]
    assert decoding.end_at_tool_call('a<tool_call>{}</tool_call> more') == ("a<tool_call>{}</tool_call>", True)

"""Accepted corrections (the student's own work, re-done) into an SFT build: which ones are new, how many the share
allows, each as chat messages in the project's tool convention, and its preference pair.

An example is the request's messages plus the correction's assistant message. The request's OpenAI `tools` reach the
system prompt the way a captured session's tools do (`convert.tools_line`: "Tools: A, B. Call a tool by writing …"):
appended to the request's own system message, or a new agent system message when the request has none. Only the
correction's turn is trained: the earlier assistant turns of the request are the client's history (the student's own
unchecked answers, often) and stay masked, like the prompt.
"""
from __future__ import annotations

import math
from typing import Any

from app.core.base.store import Store
from app.core.scrub.scrubber import Scrubber
from app.core.datasets import checks, manifest, windows
from app.core.datasets.catalog import Registry
from app.core.datasets.config import BuildConfig
from app.core.datasets.convert import system_message, tools_line
from app.core.datasets.examples import Build, Example, Renderer, slim
from app.core.datasets.manifest import CorrectionUse
from app.core.datasets.pair_records import pair_record
from app.core.experience.corrections import trainable
from app.core.toolcalls.convention import arguments_of, text_of, tools_in_system

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def session_id(experience_id: str) -> str:
    """The example's session id: the experience it came from (never a captured session's id)."""
    return f"experience:{experience_id}"


def tool_names(tools: list[Any]) -> list[str]:
    """The names of an OpenAI `tools` list, in its order (unknown shapes skipped)."""
    out = []
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"] not in out:
            out.append(fn["name"])
    return out


def _calls(message: dict) -> list[dict]:
    out = []
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function", call) if isinstance(call, dict) else {}
        out.append({"id": call.get("id") or f"call_{i}", "type": "function",
                    "function": {"name": fn.get("name") or "unknown", "arguments": arguments_of(fn.get("arguments"))}})
    return out


def chat_message(message: dict, names: dict[str, str]) -> dict | None:
    """An OpenAI wire message as a dataset message: text content, tool calls with argument objects, tool results
    named after their call (`names`: call id -> tool name, filled as calls are seen). None for an unknown role."""
    role = ROLES.get(message.get("role", ""))
    if role is None:
        return None
    out: dict[str, Any] = {"role": role, "content": text_of(message.get("content"))}
    if role == "assistant" and (calls := _calls(message)):
        out["tool_calls"] = calls
        names.update({c["id"]: c["function"]["name"] for c in calls})
    if role == "tool":
        call_id = message.get("tool_call_id") or "unknown"
        out.update(tool_call_id=call_id, name=message.get("name") or names.get(call_id, "unknown"))
    return out


def prompt_messages(prompt: list[dict], tools: list[Any], agent_system: bool = True) -> list[dict]:
    """A request's messages as dataset messages, its tools in the system prompt as a captured session's are (appended
    to its own system message, or a new agent system message first). `agent_system` False: a request without tools
    and without a system message gets none (the served model answers a plain chat as its template does)."""
    names: dict[str, str] = {}
    msgs = [m for m in (chat_message(x, names) for x in prompt if isinstance(x, dict)) if m is not None]
    listed = tool_names(tools)
    if msgs and msgs[0]["role"] == "system":
        if listed and not tools_in_system(msgs[0]["content"]):
            msgs[0] = {**msgs[0], "content": msgs[0]["content"].rstrip() + tools_line(listed)}
    elif listed or agent_system:
        msgs.insert(0, system_message(listed))
    return msgs


def messages(prompt: list[dict], chosen: dict, tools: list[Any]) -> list[dict]:
    """The example's messages: the request's (with its tools in the system prompt) and the correction last."""
    return [*prompt_messages(prompt, tools), chat_message({**chosen, "role": "assistant"}, {})]


def preference_pair(msgs: list[dict], rejected: dict, use: CorrectionUse) -> dict:
    """chosen = the correction, rejected = the student's answer, prompt = the request's messages (as the SFT example
    sees them): a preference_v1 record with the correction's provenance."""
    student = chat_message({**rejected, "role": "assistant"}, {})
    return pair_record(msgs[:-1], msgs[-1], student, session_id=session_id(use.experience_id),
                       source="correction", correction_id=use.correction_id, experience_id=use.experience_id,
                       teacher_model=use.teacher_model)


def allowed(config: BuildConfig, fresh: int, pending: int) -> int:
    """How many corrections this build takes: at most `corrections_share` of the new train examples (sessions' and
    corrections' together), but never fewer than `corrections_min` (so they do not starve in a build with few or no
    new sessions); the rest wait for the next build."""
    if not config.corrections or not pending:
        return 0
    share = config.corrections_share
    by_share = math.floor(fresh * share / (1 - share) + 1e-9) if share else 0
    return min(pending, max(by_share, config.corrections_min if share else 0))


def use_of(t: Any) -> CorrectionUse:
    """The manifest's entry for one `app.core.experience.corrections.Trainable`."""
    return CorrectionUse(correction_id=t.correction_id, experience_id=t.experience_id, teacher_model=t.teacher_model,
                         source=t.source, created_at=t.created_at or "", cost=t.cost)


PROVENANCE = ("correction_id", "experience_id", "teacher_model", "correction_source")


def take(store: Store, config: BuildConfig, b: Build, renderer: Renderer, mode: str,
                 scrubber: Scrubber) -> None:
    """Accepted corrections into the build's train split, oldest first: in an incremental build those no earlier dataset of
    this base model holds, as many as `corrections.allowed` lets in; the rest wait for the next build."""
    if not config.corrections:
        return
    used = Registry(store).corrections_used(config.base_model, config.learned_from) if mode == "incremental" \
        else set()
    pending = [t for t in trainable(store) if t.correction_id not in used]
    fresh = sum(1 for e in b.examples if e.split == "train" and e.source == "new")
    room = allowed(config, fresh, len(pending))
    taken = {e.id for e in b.examples}
    tried = 0
    for t in pending:
        if len(b.corrections) >= room:
            break
        tried += 1
        _correction(t, config, renderer, b, scrubber, taken)
    b.counts["from_corrections"] = sum(1 for e in b.examples if e.source == "correction")
    b.counts["correction_pairs"] = len(b.pairs)
    if len(pending) > tried:
        b.counts["corrections waiting for the next build (share)"] = len(pending) - tried


def _correction(t, config: BuildConfig, renderer: Renderer, b: Build, scrubber: Scrubber, taken: set[str]) -> None:
    """One correction as a train example (checked like a session's; too long: its last window) and its pair."""
    sid, msgs = session_id(t.experience_id), messages(t.prompt, t.chosen, t.tools)
    problems = checks.standard({"messages": msgs}, scrubber)
    window = None if problems else _last_window(msgs, config, renderer)
    if window is None and not problems:
        problems = [checks.Problem("over_length", f"the correction and its request do not fit in "
                                                  f"{config.max_length} tokens")]
    rendered = None if problems else renderer.render(window)
    if rendered is not None:
        problems += [checks.Problem("round_trip", p) for p in renderer.deep(window, rendered)]
    if problems:
        b.counts["corrections excluded"] += 1
        b.exclude(sid, 0, problems)
        return
    train_last_turn(window, rendered, renderer)
    use = use_of(t)
    use.example_id = manifest.example_id(window, renderer.template_sha256)
    b.corrections.append(use)  # listed even when its example is another's (the same answer again): it is used
    if use.example_id in taken:
        return
    taken.add(use.example_id)
    pair = preference_pair(window, t.rejected, use)
    if checks.spec_problem(pair, "preference_v1") is None:
        use.pair_id = pair["id"]
        b.pairs.append(pair)
    provenance = {"correction_id": use.correction_id, "experience_id": use.experience_id,
                  "teacher_model": use.teacher_model, "correction_source": use.source}
    b.examples.append(Example(use.example_id, sid, "train", 0, window, slim(rendered), source="correction",
                              provenance=provenance))


def _last_window(msgs: list[dict], config: BuildConfig, renderer: Renderer) -> list[dict] | None:
    """The messages, or when too long the last turn-boundary window, if it still ends with the correction."""
    found, _ = windows.windows(msgs, config.max_length, renderer.count)
    last = found[-1] if found else None
    return last if last and last[-1] is msgs[-1] else None


def train_last_turn(messages: list[dict], rendered: dict, renderer: Renderer) -> None:
    """Only the last assistant turn (a correction's) is trained: the tokens of the messages before it are masked, in
    the preview too."""
    masks = rendered["assistant_masks"]
    cut = min(renderer.count(messages[:-1]), len(masks))
    rendered["assistant_masks"] = [0] * cut + list(masks[cut:])
    offsets = rendered.get("offsets")
    if offsets is not None and "segments" in rendered:
        at = offsets[cut][0] if cut < len(offsets) else len(rendered.get("text", ""))
        rendered["segments"] = untrained_before(rendered["segments"], at)


def untrained_before(segments: list[list], at: int) -> list[list]:
    """Preview segments ([text, trained] runs) with every character before `at` untrained."""
    out: list[list] = []
    pos = 0
    for text, trained in segments:
        head = max(0, min(len(text), at - pos))
        for piece, flag in ((text[:head], 0), (text[head:], trained)):
            if not piece:
                continue
            if out and out[-1][1] == flag:
                out[-1][0] += piece
            else:
                out.append([piece, flag])
        pos += len(text)
    return out

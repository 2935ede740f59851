"""The smoke test a GGUF passes before anything serves it: it loads with llama-cpp-python, a tool prompt rendered
through its EMBEDDED chat template gets an answer that ends its turn (no rambling to the token limit), and its size,
hash, quantization, load time and tokens/s are recorded."""
from __future__ import annotations

import time
from pathlib import Path

from app.core.base.fingerprint import sha256_file
from app.core.datasets.convert import system_message
from app.core.ship.errors import ShipError

MAX_TOKENS = 96  # an answer longer than this did not stop: the template or the stop token is wrong
SPEED_TOKENS = 64
TOOL_PROMPT = [system_message(["Bash", "Read", "Edit"]),
               {"role": "user", "content": "What is the capital of France?"}]
MAGIC = b"GGUF"


def check_file(path: Path) -> None:
    """Refuse what is not a GGUF before loading it (llama.cpp would fail less clearly)."""
    if not path.is_file():
        raise ShipError(f"{path} does not exist", fix="export the checkpoint again")
    with path.open("rb") as f:
        if f.read(4) != MAGIC:
            raise ShipError(f"{path.name} is not a GGUF file", why="it does not start with the GGUF magic bytes",
                            fix="export the checkpoint again")


def load(path: Path, n_ctx: int = 2048, **kw):
    """llama_cpp.Llama on the file, with the chat template embedded in it; ShipError when llama.cpp refuses it."""
    import llama_cpp

    check_file(path)
    try:
        return llama_cpp.Llama(str(path), n_ctx=n_ctx, verbose=False, **kw)
    except (ValueError, RuntimeError, OSError) as exc:
        raise ShipError(f"llama.cpp cannot load {path.name}", why=str(exc),
                        fix="the file is truncated or corrupt: export the checkpoint again") from exc


def quant_name(llm) -> str:
    import llama_cpp

    ftype = int(llm.metadata.get("general.file_type", -1))
    names = {getattr(llama_cpp, n): n.removeprefix("LLAMA_FTYPE_MOSTLY_").lower() for n in dir(llama_cpp)
             if n.startswith("LLAMA_FTYPE_MOSTLY_")}
    return names.get(ftype, "f32" if ftype == 0 else f"type {ftype}")


def answer(llm, messages: list[dict], max_tokens: int = MAX_TOKENS) -> dict:
    """A greedy chat completion through the embedded template."""
    out = llm.create_chat_completion(messages=messages, max_tokens=max_tokens, temperature=0.0)
    choice = out["choices"][0]
    return {"text": choice["message"].get("content") or "", "finish_reason": choice.get("finish_reason"),
            "tokens": out["usage"]["completion_tokens"]}


def speed(llm) -> float:
    """Generated tokens per second over SPEED_TOKENS tokens (the end token banned, so every run is as long)."""
    bias = {llm.token_eos(): -1e9}
    started = time.perf_counter()
    out = llm.create_completion("The capital of France is", max_tokens=SPEED_TOKENS, temperature=0.0,
                                logit_bias=bias)
    elapsed = time.perf_counter() - started
    return out["usage"]["completion_tokens"] / elapsed if elapsed > 0 else 0.0


def smoke(path: Path, n_ctx: int = 2048) -> dict:
    """Load, answer the tool prompt, measure; the result says ok and, when not, why (nothing raises for a bad
    answer: a file that cannot load raises ShipError)."""
    started = time.perf_counter()
    llm = load(path, n_ctx)
    load_s = time.perf_counter() - started
    try:
        template = llm.metadata.get("tokenizer.chat_template")
        got = answer(llm, TOOL_PROMPT)
        tps = speed(llm)
        quant = quant_name(llm)
    finally:
        llm.close()
    why = ""
    if not template:
        why = "the GGUF carries no chat template: runtimes would guess one and the model would ramble"
    elif not got["text"].strip():
        why = "the model answered nothing"
    elif got["finish_reason"] != "stop":
        why = (f"the answer did not end its turn within {MAX_TOKENS} tokens (it rambles): the stop token or the "
               "chat template does not match training")
    return {"file": path.name, "sha256": sha256_file(path), "size": path.stat().st_size, "quant_type": quant,
            "load_s": round(load_s, 3), "tokens_per_s": round(tps, 1), "answer": got["text"][:500],
            "finish_reason": got["finish_reason"], "answer_tokens": got["tokens"], "ok": not why, "why": why}

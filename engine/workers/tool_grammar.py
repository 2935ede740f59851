"""The tool-call grammar (app/core/toolcalls/grammar.py) as llama.cpp takes it, applied lazily — free text decodes
unconstrained until `<tool_call>` is written, then the call is held to the grammar — for the judge and the server
alike."""
from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from app.core.judge import decoding
from app.core.toolcalls.grammar import CLOSE, OPEN

SERVED = {"on": decoding.GRAMMAR}  # the server decodes requests with tools under their grammar (its --grammar)
_PARSED: dict[tuple[int, str], bool] = {}  # (vocab, grammar text) -> llama.cpp parsed it


def parses(llama, text: str) -> bool:
    """Whether llama.cpp parses the grammar for this model's vocabulary (a grammar it refuses would crash its sampler
    chain, so such a request decodes without one); the answer is kept per vocabulary and text."""
    import llama_cpp

    vocab = llama._model.vocab
    key = (int(vocab or 0), text)
    if key not in _PARSED:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
        if sampler:
            llama_cpp.llama_sampler_free(sampler)
        else:
            print("nightschool: llama.cpp refused the tool-call grammar; the answer decodes without it "
                  "(a bug: tests/core/toolcalls/test_grammar.py should catch it)", file=sys.stderr)
        _PARSED[key] = bool(sampler)
    return _PARSED[key]


@dataclass(frozen=True)
class Lazy:
    """A tool grammar that applies once `<tool_call>` is written (llama.cpp's lazy grammar, which llama-cpp-python's
    `generate` does not take): until then every token is sampled as without a grammar, at the same speed (a grammar
    over free text checks each of the vocabulary's pieces at every step: ~3x slower), after it the call grammar."""

    call: object  # LlamaGrammar of what follows the opening tag


def for_tools(llama, tools: Mapping[str, dict | None]) -> Lazy | None:
    """The lazy grammar for these tools, or None (no tools, or a grammar llama.cpp refused)."""
    from llama_cpp import LlamaGrammar

    text = decoding.tool_grammar(tools, after_open=True)
    if text is None or not parses(llama, text):
        return None
    return Lazy(LlamaGrammar.from_string(text, verbose=False))


def _text(llama, tokens: list[int]) -> str:
    return llama.detokenize(tokens).decode("utf-8", errors="ignore")


def generate(llama, tokens: list[int], grammar=None, run=None, **kwargs) -> Iterator[int]:
    """`llama.generate(tokens, grammar=…, **kwargs)`, a `Lazy` grammar applied lazily: free tokens until the answer's
    text completes `<tool_call>` (a token that runs past the tag is replaced by the tag's rest, tokenised), then
    `generate` again on everything so far (the KV cache keeps the prefix) under the call grammar. A closing tag with no
    call open ends the answer (an end-of-turn token), as the full grammar forbids it. `run`: the generate to wrap."""
    run = run or llama.generate
    if not isinstance(grammar, Lazy):
        yield from run(tokens, grammar=grammar, **kwargs)
        return
    prompt, produced = list(tokens), []
    free = run(prompt, grammar=None, **kwargs)
    for token in free:
        before, text = _text(llama, produced), _text(llama, produced + [token])
        if (at := text.find(OPEN)) >= 0:
            free.close()
            end = at + len(OPEN)
            tail = [token] if len(text) == end else llama.tokenize(text[len(before):end].encode("utf-8"),
                                                                  add_bos=False, special=False)
            yield from tail
            yield from run(prompt + produced + tail, grammar=grammar.call, **kwargs)
            return
        if CLOSE in text:
            free.close()
            yield llama.token_eos()
            return
        produced.append(token)
        yield token


def install(llama) -> None:
    """Make `llama.generate` take a `Lazy` grammar (the server's chat handler passes its request's grammar down to
    it through create_completion)."""
    run = llama.generate

    def lazy_generate(tokens, grammar=None, **kwargs):
        return generate(llama, tokens, grammar, run=run, **kwargs)

    llama.generate = lazy_generate


def with_tool_grammar(handler):
    """A chat handler that decodes a request with `tools` under their tool-call grammar (decoding.tool_grammar:
    free text, and a `<tool_call>` once opened closes only as a valid call of one of them), as the judge decodes a
    context with tools. Left alone: no tools, a request that brings its own grammar, tool_choice "none" or naming
    one function (llama-cpp-python's own grammar then), or the grammar switched off (--grammar off)."""
    from app.core.toolcalls.grammar import tools_of

    def handle(*, llama, tools=None, tool_choice=None, grammar=None, **kwargs):
        if SERVED["on"] and grammar is None and tools and tool_choice in (None, "auto", "required"):
            grammar = for_tools(llama, tools_of(tools))
        return handler(llama=llama, tools=tools, tool_choice=tool_choice, grammar=grammar, **kwargs)

    return handle

"""The tool grammar applied lazily, on the embedded SmolLM2 GGUF (real weights, llama.cpp): free text decodes exactly
as with no grammar; once the answer writes `<tool_call>` the call is held to the grammar and closes as a valid call of
a known tool; a closing tag with no call open ends the answer. Phase one is steered by a real llama.cpp grammar that
makes the model write the tag (the base model rarely calls by itself)."""
from __future__ import annotations

import pytest

from app.core.judge.nextaction import judge
from app.core.toolcalls import grammar
from engine.workers import tool_grammar

TOOLS = {"Read": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
         "Bash": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
TEACHER = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "1", "type": "function", "function": {"name": "Read", "arguments": {"file_path": "app.py"}}}]}


@pytest.fixture(scope="module")
def llm():
    from engine.loading import embedded_gguf
    from engine.workers import smoke

    model = smoke.load(embedded_gguf(), n_ctx=512)
    yield model
    model.close()


def prompt(llm, text: str) -> list[int]:
    import jinja2

    rendered = jinja2.Template(llm.metadata["tokenizer.chat_template"]).render(
        messages=[{"role": "user", "content": text}], add_generation_prompt=True)
    return llm.tokenize(rendered.encode(), add_bos=False, special=True)


def answer(llm, ids: list[int], lazy, run=None, limit: int = 400) -> tuple[str, bool]:
    out = []
    for n, token in enumerate(tool_grammar.generate(llm, ids, lazy, run=run, reset=True, temp=0.0,
                                                    repeat_penalty=1.1)):
        if token == llm.token_eos():
            return llm.detokenize(out).decode(errors="replace"), True
        out.append(token)
        text = llm.detokenize(out).decode(errors="ignore")
        if grammar.CLOSE in text or n + 1 >= limit:
            return text, grammar.CLOSE in text
    return llm.detokenize(out).decode(errors="replace"), True


def steered(llm, lead: str):
    """A generate whose free phase must write `lead` first (then anything): the model's own tokens, steered."""
    from llama_cpp import LlamaGrammar

    steer = LlamaGrammar.from_string(f'root ::= {grammar.literal(lead)} [^\\x00]*', verbose=False)

    def run(tokens, grammar=None, **kwargs):
        return llm.generate(tokens, grammar=grammar or steer, **kwargs)
    return run


def test_free_text_is_decoded_as_without_a_grammar(llm):
    ids = prompt(llm, "What does a unit test check? One sentence.")
    free, _ = answer(llm, ids, None)
    llm.reset()
    lazy, _ = answer(llm, ids, tool_grammar.for_tools(llm, TOOLS))
    assert free.strip() and lazy == free and grammar.OPEN not in lazy


def test_an_opened_call_closes_as_a_valid_call_of_a_known_tool(llm):
    ids = prompt(llm, "Read app.py and tell me what it does.")
    text, ended = answer(llm, ids, tool_grammar.for_tools(llm, TOOLS), run=steered(llm, "Reading it. <tool_call>"))
    assert text.startswith("Reading it. <tool_call>") and ended
    judged = judge(TEACHER, text, set(TOOLS), TOOLS)
    assert judged.attempted == judged.valid == 1, (text, judged)
    assert judged.outcome in ("agree", "other_args", "other_tool"), (text, judged)


def test_a_closing_tag_with_no_call_open_ends_the_answer(llm):
    ids = prompt(llm, "Say something.")
    text, ended = answer(llm, ids, tool_grammar.for_tools(llm, TOOLS), run=steered(llm, "Done. </tool_call>"))
    assert ended and grammar.CLOSE not in text and text.startswith("Done. </tool_call"[:8])
    assert judge({"role": "assistant", "content": "Done."}, text, set(TOOLS), TOOLS).attempted == 0

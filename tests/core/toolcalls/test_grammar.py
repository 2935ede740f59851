"""The tool-call grammar, parsed and run by llama.cpp on the embedded SmolLM2 vocabulary (no weights): free text with '<' and code stays allowed, a `<tool_call>` once opened closes only as a valid call of a known tool."""
from __future__ import annotations

import ctypes
import json

import pytest

from app.core.judge import decoding
from app.core.toolcalls import grammar, schemas

CALLS = [{"name": "Read", "arguments": {"file_path": "a.py", "limit": 3}},
         {"name": "Read", "arguments": {"file_path": "b.py"}},
         {"name": "Edit", "arguments": {"file_path": "a.py", "old_string": "x", "new_string": "y"}},
         {"name": "Bash", "arguments": {"command": "ls"}}]
TOOLS = schemas.infer(CALLS)


@pytest.fixture(scope="module")
def vocab():
    from engine.loading import embedded_gguf
    from engine.workers import smoke

    llm = smoke.load(embedded_gguf(), n_ctx=64, vocab_only=True)
    yield llm
    llm.close()


def run(llm, text: str, gbnf: str) -> str:
    """Feed `text`'s tokens through llama.cpp's grammar sampler: "refused" at the first token it rejects, "complete"
    when the end of the answer is allowed after the last token, "open" when more must follow."""
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
    assert sampler, "llama.cpp did not parse the grammar"
    try:
        def allowed(token: int) -> bool:
            data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
            arr = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
            return data[0].logit > -1e30

        for token in llm.tokenize(text.encode(), add_bos=False, special=False):
            if not allowed(token):
                return "refused"
            llama_cpp.llama_sampler_accept(sampler, token)
        return "complete" if allowed(llm.token_eos()) else "open"
    finally:
        llama_cpp.llama_sampler_free(sampler)


def call(name: str, arguments: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_free_text_with_angle_brackets_and_code_is_allowed(vocab):
    gbnf = decoding.tool_grammar(TOOLS)
    for text in ["", "Done: the tests pass.", "if a < b and b > c:\n    return x<<2  # <tag> </div> <tool>",
                 "tags? <tool_cal> <tool_calx <<tool <tool_cal<tool_ca <", "html: <table><tr></tr></table>",
                 "unicode → é ✓ and a trailing <", "</tool_cal and </tool"]:
        assert run(vocab, text, gbnf) == "complete", text


def test_an_opened_call_closes_only_as_a_valid_call_of_a_known_tool(vocab):
    gbnf = decoding.tool_grammar(TOOLS)
    assert run(vocab, "First I read it.\n" + call("Read", {"file_path": "a.py"}), gbnf) == "complete"
    assert run(vocab, call("Read", {"file_path": "a.py", "limit": 20}), gbnf) == "complete"
    assert run(vocab, '<tool_call>\n{"name": "Bash", "arguments": {"command": "pytest -q"}}\n</tool_call>',
               gbnf) == "complete"
    edit = {"file_path": "a.py", "old_string": "if a < b:\n\t\"x\"", "new_string": "y"}
    assert run(vocab, call("Edit", edit), gbnf) == "complete"  # escapes inside strings
    assert run(vocab, "<tool_call>", gbnf) == "open"  # opened: it must go on
    assert run(vocab, call("Read", {"file_path": "a.py"})[:-3], gbnf) == "open"
    for bad in [call("Write", {"file_path": "a.py"}),  # no such tool
                call("Read", {"limit": 3}),  # a required argument missing
                call("Read", {"file_path": 3}),  # the wrong type
                call("Read", {"file_path": "a.py", "mode": "r"}),  # an argument the schema does not have
                '<tool_call>{"name": "Read", "arguments": {"file_path": "a.py"}</tool_call>',  # unbalanced
                "<tool_call>Read a.py</tool_call>", "a stray </tool_call>",
                '<tool_call>{"name": "Read", "arguments": {"file_path": "a\nb"}}</tool_call>']:  # raw newline
        assert run(vocab, bad, gbnf) == "refused", bad
    after = call("Bash", {"command": "ls"}) + " and more"
    assert run(vocab, after, gbnf) == "refused"  # the answer ends at its call


def test_every_call_the_grammar_completes_is_valid_for_the_judge():
    text = decoding.tool_grammar(TOOLS)
    assert text == decoding.tool_grammar(dict(reversed(list(TOOLS.items()))))  # one grammar per tool set
    for c in CALLS:
        assert schemas.validity(call(c["name"], c["arguments"]), set(TOOLS), TOOLS) == (1, 1, [])


def test_a_schema_the_grammar_cannot_express_falls_back_to_any_object_for_that_tool(vocab):
    tools = {"Read": TOOLS["Read"], "Fancy": {"type": "object", "properties": {"x": {"$ref": "#/defs/x"}}},
             "Loose": None, "Odd": {"type": "string"},
             "Rich": {"type": "object", "required": ["mode"], "properties": {
                 "mode": {"enum": ["fast", "slow"]}, "tags": {"type": "array", "items": {"type": "string"}},
                 "opts": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"n": {"type": "integer"}}}]},
                 "on": {"type": "boolean"}, "k": {"const": 1}}}}
    gbnf = decoding.tool_grammar(tools)
    assert set(grammar.fallbacks(tools)) == {"Fancy", "Odd"}
    assert run(vocab, call("Fancy", {"anything": [1, {"a": None}]}), gbnf) == "complete"
    assert run(vocab, call("Loose", {}), gbnf) == "complete"
    assert run(vocab, call("Odd", {"y": "z"}), gbnf) == "complete"
    assert run(vocab, call("Rich", {"mode": "fast", "tags": ["a"], "opts": {"n": 2}, "on": True, "k": 1}),
               gbnf) == "complete"
    assert run(vocab, call("Rich", {"mode": "fast", "opts": None}), gbnf) == "complete"
    assert run(vocab, call("Rich", {"mode": "medium"}), gbnf) == "refused"
    assert run(vocab, call("Read", {"file_path": 1}), gbnf) == "refused"  # the others keep their schema


def test_tools_of_a_request_and_no_tools_no_grammar():
    request = [{"type": "function", "function": {"name": "Read", "parameters": TOOLS["Read"]}},
               {"type": "function", "function": {"name": "Ping"}}, {"type": "function"}, "junk"]
    assert grammar.tools_of(request) == {"Read": TOOLS["Read"], "Ping": None}
    assert decoding.tool_grammar({}) is None and decoding.tool_grammar(grammar.tools_of(None)) is None
    with pytest.raises(ValueError, match="at least one tool"):
        grammar.gbnf({})

"""Free-text decoding speed under the tool grammar: none, the full grammar, and the lazy one the product uses (the
embedded SmolLM2 GGUF, one thread, 48 greedy tokens after a warm round).

    .venv/bin/python -m bench.grammar_speed
"""
import time, jinja2, os
from llama_cpp import LlamaGrammar
from app.core.judge import decoding
from engine.loading import embedded_gguf
from engine.workers import smoke, tool_grammar
llm = smoke.load(embedded_gguf(), n_ctx=1024, n_threads=1)
tools = {"Read": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
         "Bash": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
ids = llm.tokenize(jinja2.Template(llm.metadata["tokenizer.chat_template"]).render(messages=[{"role": "user", "content": "Explain what a unit test is, in detail."}], add_generation_prompt=True).encode(), add_bos=False, special=True)
full = LlamaGrammar.from_string(decoding.tool_grammar(tools), verbose=False)
def run(kind):
    g = {"none": None, "full": full, "lazy": tool_grammar.for_tools(llm, tools)}[kind]
    gen = tool_grammar.generate(llm, ids, g, reset=True, temp=0.0, repeat_penalty=1.1) if kind != "full" else llm.generate(ids, reset=True, temp=0.0, repeat_penalty=1.1, grammar=g)
    out=[]; t0=None
    for n, tok in enumerate(gen):
        if t0 is None: t0 = time.perf_counter()  # after the prompt (cached after the first round)
        out.append(tok)
        if n >= 48: break
    return len(out[1:]) / (time.perf_counter() - t0), llm.detokenize(out).decode(errors="ignore")
for rnd in range(2):
    res = {k: run(k) for k in ("none", "full", "lazy")}
print(f"load {os.getloadavg()[0]:.1f}; " + "; ".join(f"{k} {v[0]:.0f} tok/s" for k, v in res.items()), "| same text:", res["none"][1] == res["lazy"][1], res["none"][1] == res["full"][1])

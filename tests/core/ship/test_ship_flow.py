"""Ship end to end on real parts with a tiny model llama.cpp can convert: SFT jobs through the engine, the export
worker (merge, llama.cpp's converter and quantizer, LoRA GGUF, template check, smoke test), the built-in server on a
real loopback socket behind its API key, a second deployment, rollback, a truncated GGUF refused while the old model
keeps serving, and the server coming back after it died. The gate's verdicts are recorded directly here (the gate
itself runs on real evaluations in tests/core/judge)."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from app.cli.main import main as cli
from app.core.base.schema import EvalRow, VerdictRow
from app.core.judge.deployment import deployed
from app.core.judge.records import resolve
from app.core.ship import deploy as D, exports as X, serving as S
from app.core.ship.errors import ShipError
from tests.conftest import fast_hyper, write_jsonl
from tests.tiny_model import capital_chats

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def record_verdict(store, checkpoint_id: int, verdict: str = "pass") -> None:
    with store.session() as s:
        ev = EvalRow(checkpoint_id=checkpoint_id, base_model="m", label="x", eval_set="s", eval_set_sha256="0" * 64,
                     settings_sha256="0" * 64, report_path="")
        s.add(ev)
        s.flush()
        s.add(VerdictRow(checkpoint_id=checkpoint_id, eval_id=ev.id, verdict=verdict,
                         reasons_json=json.dumps([f"recorded {verdict} (test)"]), thresholds_json="{}"))


def train(manager, tmp_path, model, phrase: str):
    file = write_jsonl(tmp_path / f"{abs(hash(phrase))}.jsonl", capital_chats(phrase, 32))
    job = manager.wait(manager.submit(file, model=str(model), hyper=fast_hyper(max_steps=20, max_length=256)).id,
                       timeout=900)
    assert job.state == "completed", job.error
    return resolve(manager.store, job.id)


def served_name() -> str:
    return S.health()["model"]


def test_train_export_deploy_chat_second_model_rollback(store, manager, shippable_model, tmp_path, capsys):
    first = train(manager, tmp_path, shippable_model, "The capital of {c} is {p}.")
    second = train(manager, tmp_path, shippable_model, "{p} is the capital of {c}.")

    # Export: merged + quantized by llama.cpp, every file smoke-tested, plus the LoRA GGUF.
    exp = X.export(store, first, ["q4_k_m", "q8_0"])
    assert [f["quant"] for f in exp.files] == ["q4_k_m", "q8_0"]
    for f in exp.files:
        assert f["ok"], f["why"]
        assert f["finish_reason"] == "stop" and f["answer"].strip() and f["tokens_per_s"] > 0
        assert f["quant_type"] == f["quant"] and (exp.folder / f["file"]).stat().st_size == f["size"]
    assert exp.row.lora_file and (exp.folder / exp.row.lora_file).read_bytes()[:4] == b"GGUF"
    assert exp.meta["stop"] == ["<|im_end|>"] and exp.meta["eos_token"] == "<|im_end|>"
    assert X.export(store, first, ["q4_k_m", "q8_0"]).row.id == exp.row.id  # reused, not redone

    # The base model from the terminal, placed for LM Studio; Ollama is not installed here: a clear message.
    assert cli(["export", f"base:{shippable_model}", "--quant", "f16", "--ollama", "ns-test",
                "--lmstudio", str(tmp_path / "lms")]) == 1
    out = capsys.readouterr().out
    assert "smoke test passed" in out and "ollama create ns-test -f" in out and "Modelfile" in out
    base_exp = X.history(store)[0]
    placed = list((tmp_path / "lms").rglob("*.gguf"))
    assert len(placed) == 1 and placed[0].read_bytes()[:4] == b"GGUF"
    assert 'PARAMETER stop "<|im_end|>"' in (base_exp.folder / "Modelfile").read_text()
    # The LoRA GGUF works on the base GGUF (for users who keep the base).
    import llama_cpp

    llm = llama_cpp.Llama(str(base_exp.path("f16")), lora_path=str(exp.folder / exp.row.lora_file), verbose=False)
    try:
        assert llm.create_chat_completion(QUESTION, max_tokens=24, temperature=0)["choices"][0]["message"]["content"]
    finally:
        llm.close()

    # Deploy the first: the server answers with the key and refuses without it.
    record_verdict(store, first.id)
    d1 = D.deploy(store, first, "q4_k_m", port=0)
    assert d1.state["current"]["sha256"] == exp.file("q4_k_m")["sha256"] and d1.state["standby"] is None
    answer = S.chat([*QUESTION], max_tokens=48)
    assert answer["choices"][0]["message"]["content"].strip()
    for key in (None, "wrong-key"):
        code, body = S.request("POST", "/v1/chat/completions", {"messages": QUESTION}, key=key)
        assert code == 401, body
    code, models = S.request("GET", "/v1/models")
    (listed,) = models["data"]  # the stable name clients use, and which file serves under it
    assert code == 200 and listed["id"] == S.SERVED_MODEL and listed["nightschool"]["file"] == served_name()
    assert served_name() == Path(d1.row.file).stem
    assert deployed(store, first.base_model).checkpoint_id == first.id  # the judge's pointer agrees

    # A checkpoint the gate failed is refused without touching the server.
    record_verdict(store, second.id, "fail")
    with pytest.raises(ShipError, match="failed the quality gate"):
        D.deploy(store, second)
    assert served_name() == Path(d1.row.file).stem

    # Deploy the second: the first stays loaded for an instant rollback.
    record_verdict(store, second.id)
    d2 = D.deploy(store, second, "q4_k_m")
    st = S.state()
    assert st["current"]["name"] == Path(d2.row.file).stem and st["standby"]["name"] == Path(d1.row.file).stem
    assert served_name() == Path(d2.row.file).stem

    # Rollback restores the first (swapped back, not reloaded), recorded and pointed at.
    rb = D.rollback(store)
    st = S.state()
    assert rb.row.action == "rollback" and st["current"]["sha256"] == d1.row.sha256 == rb.row.sha256
    assert served_name() == Path(d1.row.file).stem
    assert S.request("GET", "/v1/models")[1]["data"][0]["id"] == S.SERVED_MODEL  # clients name it as before
    assert [h.action for h in D.history(store)] == ["rollback", "deploy", "deploy"]
    assert deployed(store, first.base_model).checkpoint_id == first.id

    # A truncated GGUF is refused before the switch; the old model keeps serving.
    second_file = d2.export.folder / d2.row.file
    data = second_file.read_bytes()
    second_file.write_bytes(data[: len(data) // 2])
    with pytest.raises(ShipError, match="changed since it was exported"):
        D.deploy(store, second)
    with pytest.raises(ShipError, match="refused"):  # the server's own check, when asked directly
        S.switch(S.Model(name="broken", path=str(second_file), sha256=""))
    assert served_name() == Path(d1.row.file).stem
    assert S.chat([*QUESTION], max_tokens=16)["choices"][0]["message"]["content"].strip()

    # The server died (crash, reboot): the app brings it back with what was deployed.
    os.kill(S.state()["pid"], signal.SIGKILL)
    back = D.ensure_serving(store, port=0)
    assert back is not None and back["current"]["sha256"] == d1.row.sha256
    assert cli(["serve", "stop"]) == 0 and S.state() is None


def test_embedded_template_renders_like_training(shippable_model, tmp_path):
    """The GGUF's template (read back from the file by llama.cpp) renders a tool-call conversation exactly as the
    training renderer does, and the converter is llama.cpp's own (no home converter)."""
    import llama_cpp
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    from transformers import AutoTokenizer

    from app.core.ship.template import export_template
    from engine.workers import llama_tools
    from engine.render import Renderer

    tok = AutoTokenizer.from_pretrained(str(shippable_model))
    conversation = [
        {"role": "user", "content": "Why does `make test` fail?"},
        {"role": "assistant", "content": "I will look.", "tool_calls": [
            {"type": "function", "function": {"name": "Bash", "arguments": {"command": "make test 2>&1 | tail"}}},
            {"type": "function", "function": {"name": "Read", "arguments": json.dumps({"file_path": "Makefile"})}}]},
        {"role": "tool", "content": "make: *** [test] Error 2"},
        {"role": "tool", "content": "test:\n\tpytest"},
        {"role": "assistant", "content": "pytest is not installed: `pip install pytest`."},
    ]
    shipped = tmp_path / "hf"
    tok.chat_template = export_template(tok.chat_template)
    tok.save_pretrained(shipped)
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(str(shippable_model)).save_pretrained(shipped)
    gguf = llama_tools.convert(shipped, tmp_path / "m.gguf", tmp_path / "log")
    llm = llama_cpp.Llama(str(gguf), vocab_only=True, verbose=False)
    embedded = llm.metadata["tokenizer.chat_template"]
    rendered = Jinja2ChatFormatter(embedded, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                   add_generation_prompt=False)(messages=conversation).prompt
    training = Renderer(AutoTokenizer.from_pretrained(str(shippable_model)), "t").text(conversation)
    assert rendered == training
    assert '<tool_call>{"name": "Bash", "arguments": {"command": "make test 2>&1 | tail"}}</tool_call>' in rendered
    assert "You are a helpful AI assistant named SmolLM" in rendered  # the base template's own default system

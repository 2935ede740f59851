"""The smoke test that stands between an export and the server: a model that never ends its turn (here: an untrained
one) is refused with the reason; a file that is not a GGUF, or a truncated one, is refused before llama.cpp runs
or with llama.cpp's reason; a good file answers and stops and its numbers are recorded."""
from __future__ import annotations

import pytest

from app.core.ship.errors import ShipError
from engine.workers import llama_tools
from engine.workers import smoke


@pytest.fixture(scope="module")
def ggufs(shippable_model, tmp_path_factory):
    """The shippable model as q8_0, and an untrained model of the same shape (it rambles), both via llama.cpp."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("smoke")
    untrained = out / "untrained"
    torch.manual_seed(7)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(shippable_model)).save_pretrained(untrained)
    AutoTokenizer.from_pretrained(shippable_model).save_pretrained(untrained)
    made = {}
    for name, folder in (("good", shippable_model), ("rambles", untrained)):
        f16 = llama_tools.convert(folder, out / f"{name}.f16.gguf", out / "log")
        made[name] = llama_tools.quantize(f16, out / f"{name}.q8_0.gguf", "q8_0")
    return made


def test_a_good_model_answers_and_stops(ggufs):
    got = smoke.smoke(ggufs["good"])
    assert got["ok"], got["why"]
    assert got["finish_reason"] == "stop" and "capital" in got["answer"] and got["quant_type"] == "q8_0"
    assert got["size"] == ggufs["good"].stat().st_size and len(got["sha256"]) == 64 and got["tokens_per_s"] > 0


def test_a_model_that_does_not_stop_is_refused_with_the_reason(ggufs):
    got = smoke.smoke(ggufs["rambles"])
    assert not got["ok"]
    assert "did not end its turn" in got["why"] or "answered nothing" in got["why"]


def test_not_a_gguf_and_truncated_files_are_refused(ggufs, tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ShipError, match="not a GGUF file"):
        smoke.smoke(fake)
    data = ggufs["good"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(ShipError, match="cannot load"):
        smoke.smoke(cut)

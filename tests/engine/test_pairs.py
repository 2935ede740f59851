"""Preference pairs through the real worker (engine.workers.mine_pairs): a real SFT dataset built from the real-world transcripts,
a real student (the tiny model + a LoRA adapter) answering greedily; chosen = the teacher's recorded action, rejected
= the student's, agreement is not a pair. The slow test does the same with the real SmolLM2 default."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from app.core.datasets import runs as runner
from app.core.base.fingerprint import sha256_dir
from app.core.capture.ingest import Ingestor
from app.core.datafiles.formats import SPECS, record_problem
from app.core.datasets import manifest as manifests
from app.core.datasets.catalog import Registry
from app.core.datasets.config import BuildConfig, Filters
from app.core.datasets.pairs import Context, PairsConfig
from app.core.importer import import_paths
from app.core.toolcalls.convention import parse_student
from engine.chat_template import normalise, tool_calls_as_text
from tests.conftest import write_jsonl
from tests.core.capture.helpers import REAL


@pytest.fixture(scope="module")
def adapter(tiny_model, tmp_path_factory) -> Path:
    """A student checkpoint: a LoRA adapter on the tiny model with non-zero weights (the bare tiny model only repeats
    the newline that ends the generation prompt, which is an empty answer)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=8, lora_alpha=32, target_modules="all-linear", init_lora_weights=False))
    out = tmp_path_factory.mktemp("student") / "checkpoint-1"
    model.save_pretrained(out)
    return out


def build_source(store, base_model: str, val_share: float = 0.0, test_share: float = 0.0) -> str:
    """A real SFT dataset from the real-world transcripts; its name."""
    import_paths(Ingestor(store), [REAL])
    run = runner.start_build(store, BuildConfig(base_model=base_model, val_share=val_share, test_share=test_share,
                                                filters=Filters(drop_abandoned=False, min_steps=1)))
    outcome = run.finish()
    assert outcome.ok, outcome.message
    return outcome.name


def run_pairs(store, config: PairsConfig):
    run = runner.start_pairs(store, config)
    events = list(run.events())
    outcome = run.finish()
    assert outcome.ok, outcome.message
    ds = Registry(store).get(outcome.name)
    folder = Path(ds.path)
    report = json.loads((folder / manifests.REPORT).read_text(encoding="utf-8"))
    return ds, folder, report, list(manifests.iter_examples(folder, "train")), events


def source_examples(store, name: str) -> dict[str, dict]:
    return {r["id"]: r for r in manifests.iter_examples(Path(Registry(store).get(name).path), "train")}


def register_source(store, tmp_path: Path, name: str, like: str, records: list[dict]) -> str:
    """A second SFT source dataset, written and registered like a build (manifest, immutable folder)."""
    src = manifests.read(Path(Registry(store).get(like).path))
    folder = tmp_path / name
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", records)
    uses = {r["session_id"]: manifests.SessionUse(id=r["session_id"], split="train", examples=1, content_sha256="")
            for r in records}
    man = manifests.Manifest(name=name, base_model=src.base_model, template_sha256=src.template_sha256,
                     created_at=datetime.now(timezone.utc).isoformat(),
                     fingerprint=manifests.fingerprint({"train": [r["id"] for r in records]}, src.template_sha256),
                     splits={"train": manifests.SplitSize(examples=len(records), sessions=len(uses))},
                     sessions=list(uses.values()))
    Registry(store).register(folder, manifests.write(folder, man))
    return name


def greedy(model_dir: Path, adapter_dir: Path | None, context: list[dict], max_new_tokens: int) -> set[str]:
    """The student's answer computed here, independently of the worker: the template over the Hermes-text messages,
    greedy decoding, the new tokens up to the end of the turn. When the answer ran to the token limit, the text
    without its last token is as right: a random tiny model's last step can be a near-tie that float rounding in
    another process breaks the other way (one CI run: a lone byte here, a skipped special token there)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir)
    text = tok.apply_chat_template(normalise(context), tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False, return_tensors="pt")
    end = tok.convert_tokens_to_ids("<|im_end|>")
    eos = model.generation_config.eos_token_id
    stops = {end, tok.eos_token_id, *(eos if isinstance(eos, list) else [eos])} - {None}  # end of turn or of text
    with torch.inference_mode():
        out = model.eval().generate(**ids, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=sorted(stops),
                                    pad_token_id=end)
    new = out[0, ids["input_ids"].shape[1]:].tolist()
    cut = next((i for i, t in enumerate(new) if t in stops), len(new))
    ends = {cut, cut - 1} if cut == max_new_tokens else {cut}
    return {tok.decode(new[:n], skip_special_tokens=True).strip() for n in ends}


PREFERENCE_FILE = [
    {"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"},
    {"prompt": [{"role": "user", "content": "Say hi"}], "chosen": [{"role": "assistant", "content": "Hi!"}],
     "rejected": [{"role": "assistant", "content": "Bye."}]},
    {"prompt": "Teaches nothing", "chosen": "same", "rejected": "same"},  # set aside when the file is checked
]


def test_pairs_put_the_teachers_action_against_the_students_and_agreement_is_no_pair(store, tiny_model, adapter,
                                                                                     tmp_path):
    source = build_source(store, str(tiny_model), val_share=0.25, test_share=0.25)
    src_man = manifests.read(Path(Registry(store).get(source).path))
    splits = {u.id: u.split for u in src_man.sessions}
    assert {"val", "test"} <= set(splits.values())  # there is something to keep out
    dropped = import_paths(Ingestor(store), [write_jsonl(tmp_path / "prefs.jsonl", PREFERENCE_FILE)])
    assert dropped.datasets[0].accepted and dropped.datasets[0].spec == "preference_v1"

    config = PairsConfig(base_model=str(tiny_model), adapter=str(adapter), max_contexts=5, max_new_tokens=12)
    ds, folder, report, records, events = run_pairs(store, config)

    assert (ds.kind, ds.spec_id, ds.mode) == ("preference", "preference_v1", "pairs")
    assert manifests.verify(folder) == [] and ds.examples == ds.train == len(records)
    man = manifests.read(folder)
    assert man.student == {"base_model": str(tiny_model), "label": str(tiny_model), "adapter": str(adapter),
                           "adapter_sha256": sha256_dir(adapter), "decoding": "greedy", "max_new_tokens": 12}
    assert man.template_sha256 == src_man.template_sha256 and man.config["source"] == source
    assert man.fingerprint == manifests.fingerprint({"train": [r["id"] for r in records]}, man.template_sha256)
    assert all(record_problem(SPECS["preference_v1"], r) is None for r in records)
    assert all(list(r) == list(records[0]) for r in records)  # the same fields in every record
    assert not [e for e in events if e.type == "log" and e.body.level == "warning"]  # the adapter fits its base
    generated = [e.body for e in events if e.type == "progress" and e.body.phase == "generate"]
    assert generated[-1].step == generated[-1].total == 5 and generated[-1].eta_s == 0

    # every context is accounted for; only train sessions of the source were asked about
    assert report["contexts"] == len(report["outcomes"]) == 5
    results = [o["result"] for o in report["outcomes"]]
    assert results.count("agreed") == report["agreed"] and results.count("pair") == report["student_pairs"] >= 1
    assert {u.split for u in man.sessions} == {"train"}
    assert {splits[u.id] for u in man.sessions} == {"train"}
    assert {s.split for s in Registry(store).sessions_of(ds.id)} == {"train"}

    student = [r for r in records if r["source"] == "student"]
    assert len(student) == report["student_pairs"]
    examples = source_examples(store, source)
    for rec in student:
        example = examples[rec["example_id"]]["messages"]
        context, teacher = example[: rec["turn"]], example[rec["turn"]]
        assert teacher["role"] == "assistant"
        assert rec["prompt"] == normalise(context)
        assert rec["chosen"] == [tool_calls_as_text(teacher)]  # the teacher's recorded action, Hermes text
        answers = greedy(tiny_model, adapter, context, 12)  # what the student says, computed here
        [said] = rec["rejected"]
        assert said["role"] == "assistant" and said["content"] and said["content"] in answers
        assert splits[rec["session_id"]] == "train"

    # the user's dropped pairs join in conversational form; the record the check set aside does not
    assert report["dropped_files_included"] == 1 and report["dropped_pairs"] == 2
    mine = {r["prompt"][0]["content"]: r for r in records if r["source"] == "dropped"}
    assert mine["What is 2 + 2?"]["chosen"] == [{"role": "assistant", "content": "4"}]
    assert mine["What is 2 + 2?"]["prompt"] == [{"role": "user", "content": "What is 2 + 2?"}]
    assert mine["Say hi"]["rejected"] == [{"role": "assistant", "content": "Bye."}]

    check_agreement_is_not_a_pair(store, tmp_path, source, records, config)


def asked(pair: dict) -> int:
    """Assistant messages in a pair's prompt: the contexts its example brings along when it is a source."""
    return sum(m["role"] == "assistant" for m in pair["prompt"])


def check_agreement_is_not_a_pair(store, tmp_path, source: str, records: list[dict], config: PairsConfig) -> None:
    """After a run: make the teacher's recorded action equal to what the student said at one context (a second
    source dataset); that context is then agreed, not a pair. Greedy decoding makes the student's answer repeatable."""
    examples = source_examples(store, source)
    pair = min((r for r in records if r["source"] == "student"), key=lambda r: (asked(r), len(json.dumps(r))))
    context = examples[pair["example_id"]]["messages"][: pair["turn"]]
    said = parse_student(pair["rejected"][0]["content"])
    other = min((r for r in examples.values() if r["session_id"] != pair["session_id"]),
                key=lambda r: (len(json.dumps(r["messages"])), r["id"]))["messages"]
    first_action = next(i for i, m in enumerate(other) if m["role"] == "assistant")
    second = register_source(store, tmp_path, "agrees-src", source, [  # the other example: one context, a pair
        {"id": "agrees", "session_id": pair["session_id"], "window": 0, "messages": [*context, said]},
        {"id": "other", "session_id": "other-session", "window": 0, "messages": other[: first_action + 1]}])

    config = config.model_copy(update={"source": second, "max_contexts": 100, "include_dropped": False})
    _, folder, report, records, _ = run_pairs(store, config)
    agreed = Context(context, said, "agrees", pair["session_id"]).key
    outcome = next(o for o in report["outcomes"] if o["key"] == agreed)
    assert outcome["result"] == "agreed" and report["agreed"] >= 1
    assert not any(r["prompt"] == normalise(context) for r in records)  # no pair for it
    assert report["student_pairs"] >= 1 and report["contexts"] == len(report["outcomes"]) == asked(pair) + 2
    assert manifests.read(folder).counts["agreed"] == report["agreed"]


def test_no_source_dataset_fails_before_loading_the_model(store, tiny_model):
    run = runner.start_pairs(store, PairsConfig(base_model=str(tiny_model)))
    outcome = run.finish()
    assert not outcome.ok and "no SFT dataset" in outcome.message and "build a dataset" in outcome.message


@pytest.mark.slow
def test_smollm2_student_pairs_and_agreement(store, tmp_path, monkeypatch):
    """The real default as the student: pairs that pass the spec, then agreement is no pair."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = build_source(store, "default")
    config = PairsConfig(max_contexts=2, max_new_tokens=16, include_dropped=False)  # base model "default"
    ds, folder, report, records, _ = run_pairs(store, config)
    assert ds.kind == "preference" and manifests.read(folder).student["base_model"] == "default"
    assert report["contexts"] == 2 and report["student_pairs"] >= 1
    assert all(record_problem(SPECS["preference_v1"], r) is None for r in records)
    check_agreement_is_not_a_pair(store, tmp_path, source, records, config)

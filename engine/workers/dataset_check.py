"""Validation worker: `python -m engine.workers.dataset_check --spec FILE` runs the core checks and the DEEP ones that need
the tokenizer — every example re-rendered with the base model's current template must give the stored tokens and
mask (no drift), decode back to its text, and fit the max length — then prints one `report` envelope."""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from app.core.base import protocol as P
from app.core.datasets import manifest, validate
from app.core.train.modelref import ModelRefError
from engine.workers.envelope import Emitter


def deep_folder(folder: Path, renderer, out: Emitter) -> list[dict]:
    man = manifest.read(folder)
    problems = []
    if man.template_sha256 != renderer.template_sha256:
        problems.append({"example": "", "check": "drift", "detail": "the base model's chat template changed since "
                         f"the build ({man.template_sha256[:12]} -> {renderer.template_sha256[:12]}); rebuild"})
    max_length = int(man.config.get("max_length", 0) or 0)
    records = list(validate.records_of(folder)) if man.kind == "sft" else []
    for i, (_split, rec) in enumerate(records):
        problems += _deep_record(rec.get("id", "?"), rec, renderer, max_length)
        out.progress("deep", i + 1, len(records))
    return problems


def _deep_record(example: str, rec: dict, renderer, max_length: int) -> list[dict]:
    rendered = renderer.render(rec["messages"])
    found = [{"example": example, "check": "round_trip", "detail": p} for p in renderer.deep(rec["messages"], rendered)]
    if "input_ids" in rec and (rec["input_ids"] != rendered["input_ids"]
                               or rec.get("assistant_masks") != rendered["assistant_masks"]):
        found.append({"example": example, "check": "drift",
                      "detail": "re-rendering gives other tokens or another mask than the stored ones"})
    if max_length and len(rendered["input_ids"]) > max_length:
        found.append({"example": example, "check": "over_length",
                      "detail": f"{len(rendered['input_ids'])} tokens > {max_length}"})
    return found


def deep_file(path: Path, renderer, max_length: int, out: Emitter) -> list[dict]:
    problems = []
    lines = [line for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    for i, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # reported by the core checks
        if isinstance(rec, dict) and isinstance(rec.get("messages"), list):
            try:
                problems += _deep_record(f"line {i}", rec, renderer, max_length)
            except Exception as exc:  # noqa: BLE001 - a record the template cannot render is a finding
                problems.append({"example": f"line {i}", "check": "round_trip",
                                 "detail": f"the template cannot render it: {type(exc).__name__}: {exc}"})
        out.progress("deep", i, len(lines))
    return problems


def run(spec: dict, out: Emitter) -> int:
    from engine import render

    target = Path(spec["target"])
    heldout = frozenset(spec.get("heldout", []))
    if target.is_dir():
        checked, problems = validate.validate_folder(target, heldout)
    else:
        checked, problems = validate.validate_file(target)
    if spec.get("base_model"):
        out.emit(P.Log(message=f"loading the tokenizer of {spec['base_model']}"))
        renderer = render.load(spec["base_model"], spec["models_dir"])
        problems += (deep_folder(target, renderer, out) if target.is_dir()
                     else deep_file(target, renderer, int(spec.get("max_length", 0)), out))
    out.emit(P.Report(target=str(target), checked=checked, problems=problems))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.workers.dataset_check", description="Validate one dataset.")
    parser.add_argument("--spec", required=True, type=Path)
    spec = json.loads(parser.parse_args(argv).spec.read_text(encoding="utf-8"))
    out = Emitter(spec.get("job", "check"))
    try:
        return run(spec, out)
    except ModelRefError as exc:
        out.emit(P.Error(message="the base model cannot be used", why=str(exc)))
    except Exception as exc:  # noqa: BLE001
        tb = traceback.format_exc()
        print(tb, file=sys.stderr)
        out.emit(P.Error(message=f"validation crashed: {type(exc).__name__}: {exc}", traceback=tb[-4000:]))
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""Fail-closed validation of an engine's result against the job spec."""
from __future__ import annotations

import json
import math
from pathlib import Path

from pydantic import ValidationError

from app.core.base import protocol as P
from app.core.base.errors import Explained
from app.core.base.fingerprint import sha256_dir, sha256_file
from app.core.train.spec import JobSpec

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
MODEL_FILES = ("config.json",)  # a full fine-tune saves the whole model (+ its weights, single or sharded)


class ResultRefused(Explained):
    """The result does not match the spec; nothing from the run may be registered."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("result refused: " + "; ".join(problems))
        self.problems = problems


def _adapter_problems(result: P.Result, run_dir: Path) -> list[str]:
    adapter = Path(result.adapter_path)
    try:
        adapter.resolve().relative_to(run_dir.resolve())
    except ValueError:
        return [f"adapter path {adapter} is outside the run dir"]
    if not adapter.is_dir():
        return [f"adapter {adapter} does not exist"]
    needed = MODEL_FILES if result.method == "full" else ADAPTER_FILES
    missing = [name for name in needed if not (adapter / name).is_file()]
    if result.method == "full" and not any(adapter.glob("model*.safetensors")):
        missing.append("model weights (model*.safetensors)")
    if missing:
        return [f"adapter is missing {', '.join(missing)}"]
    if sha256_dir(adapter) != result.adapter_sha256:
        return ["adapter fingerprint does not match its files"]
    return []


def _metric_problems(result: P.Result) -> list[str]:
    problems = []
    steps = result.metrics.get("steps")
    if not isinstance(steps, int) or steps <= 0:
        problems.append(f"steps is {steps!r}, expected a positive count")
    for key in ("first_loss", "last_loss"):
        value = result.metrics.get(key)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"{key} is {value!r}, expected a finite number")
    return problems


def validate(raw: str | dict, spec: JobSpec, spec_sha256: str) -> P.Result:
    """Return the parsed result, or raise ResultRefused listing every mismatch."""
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
        result = P.Result.model_validate(data)
    except (ValueError, ValidationError) as exc:
        raise ResultRefused([f"result is not a valid result document ({str(exc).splitlines()[0]})"]) from exc
    problems = []
    if result.job_id != spec.job_id:
        problems.append(f"job id {result.job_id!r} is not this job's ({spec.job_id!r})")
    if result.spec_sha256 != spec_sha256:
        problems.append("spec fingerprint does not match the spec this job was given")
    if result.dataset_sha256 != spec.dataset_sha256:
        problems.append("dataset fingerprint does not match the spec")
    elif not Path(spec.dataset_path).is_file() or sha256_file(spec.dataset_path) != spec.dataset_sha256:
        problems.append("the dataset snapshot on disk no longer matches its fingerprint")
    if result.recipe != spec.kind or result.method != spec.hyper.method:
        problems.append(f"result is a {result.recipe}/{result.method} run, the spec asked for "
                        f"{spec.kind}/{spec.hyper.method}")
    if result.base_model != spec.model:
        problems.append(f"base model {result.base_model!r} is not the spec's {spec.model!r}")
    problems += _adapter_problems(result, Path(spec.run_dir))
    problems += _metric_problems(result)
    if problems:
        raise ResultRefused(problems)
    return result

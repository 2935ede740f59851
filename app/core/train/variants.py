"""The named student recipes a cycle can train with (policy `recipe`) and `bench_learning --curve` compares: each is
hyper-parameters over the recipe's and dataset build options over the cycle's, with what it changes in words."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Variant:
    name: str
    words: str
    hyper: dict = field(default_factory=dict)  # over the SFT job's hyper-parameters (the policy's `hyper` wins)
    build: dict = field(default_factory=dict)  # over the cycle's dataset build options (BuildConfig fields)


DEFAULT = "standard"
VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("standard", "LoRA r 16 on turn windows: every assistant turn of a window is learnt alike"),
    Variant("actions", "the loss weighted 3x on tool-call tokens, name and arguments, over prose",
            hyper={"action_weight": 3.0}),
    Variant("decisions", "windows that end at a teacher action, the context cut from the left to fit",
            build={"windows": "decisions"}),
    Variant("full", "full fine-tuning of every weight, lr 5e-5: a 135M model fits a CPU's memory",
            hyper={"method": "full", "learning_rate": 5e-5}),
    Variant("lora-r64", "LoRA r 64, lr 1e-3", hyper={"lora_r": 64, "lora_alpha": 128, "learning_rate": 1e-3}),
    Variant("lora-r8", "LoRA r 8, lr 2e-4", hyper={"lora_r": 8, "lora_alpha": 16, "learning_rate": 2e-4}),
)}


def named(name: str) -> Variant:
    """The variant of that name; KeyError naming the ones there are."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise KeyError(f"no recipe {name!r}: choose one of {', '.join(VARIANTS)}") from None

"""Training recipes, one per method; `recipe_for(kind)` imports only the one a job needs."""
from __future__ import annotations

import importlib

RECIPES = {
    "sft": "engine.recipes.sft:SFTRecipe",
    "dpo": "engine.recipes.preference:DPORecipe",
    "orpo": "engine.recipes.preference:ORPORecipe",
    "kto": "engine.recipes.preference:KTORecipe",
    "grpo": "engine.recipes.rl:GRPORecipe",
    "rloo": "engine.recipes.rl:RLOORecipe",
}


def recipe_for(kind: str):
    """The recipe class for a job kind; ValueError names the known ones."""
    if kind not in RECIPES:
        raise ValueError(f"unknown recipe {kind!r}; known: {', '.join(RECIPES)}")
    module, cls = RECIPES[kind].split(":")
    return getattr(importlib.import_module(module), cls)

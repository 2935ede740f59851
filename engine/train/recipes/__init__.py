"""Training recipes, one per method; `recipe_for(kind)` imports only the one a job needs."""
from __future__ import annotations

from app.core.base import refs

RECIPES = {
    "sft": "engine.train.recipes.sft:SFTRecipe",
    "dpo": "engine.train.recipes.preference:DPORecipe",
    "orpo": "engine.train.recipes.preference:ORPORecipe",
    "kto": "engine.train.recipes.preference:KTORecipe",
    "grpo": "engine.train.recipes.rl:GRPORecipe",
    "rloo": "engine.train.recipes.rl:RLOORecipe",
}


def recipe_for(kind: str):
    """The recipe class for a job kind; ValueError names the known ones."""
    if kind not in RECIPES:
        raise ValueError(f"unknown recipe {kind!r}; known: {', '.join(RECIPES)}")
    return refs.load(RECIPES[kind])

"""One list of recipe kinds: the engine's recipes and every table of the app's job spec name the same kinds, and
each engine recipe class answers to its own kind."""
from __future__ import annotations

import typing

from app.core.train import spec
from engine.train import recipes


def test_the_engine_and_the_spec_know_the_same_recipes():
    kinds = set(spec.RECIPES)
    assert len(kinds) == len(spec.RECIPES)
    assert set(typing.get_args(spec.Recipe)) == kinds
    assert set(recipes.RECIPES) == kinds
    assert set(spec.DATA_FORMAT) == kinds and set(spec.DEFAULT_LR) == kinds


def test_each_recipe_class_is_the_kind_it_is_listed_as():
    for kind in spec.RECIPES:
        assert recipes.recipe_for(kind).name == kind

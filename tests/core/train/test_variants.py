"""The named recipes: each one's hyper-parameters and build options are ones the job and the build take; the policy
chooses one by name (refusing a name there is not) and a cycle's SFT job gets its hyper-parameters, the policy's own
`hyper` over them."""
from __future__ import annotations

import pytest

from app.core.datasets.config import BuildConfig
from app.core.runtime.school import policy as pol
from app.core.runtime.school.stages import job_hyper
from app.core.train.spec import Hyper
from app.core.train.variants import DEFAULT, VARIANTS, named


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_is_made_of_settings_that_exist(name):
    variant = named(name)
    Hyper(**variant.hyper)  # extra="forbid": a misspelt name fails here
    assert set(variant.build) <= set(BuildConfig.model_fields), variant.build
    BuildConfig(name="x", **variant.build)
    assert variant.words


def test_the_policy_takes_a_recipe_by_name_and_the_sft_job_gets_it(store):
    assert pol.load(store).recipe == DEFAULT and job_hyper(pol.load(store), "sft") is None
    with pytest.raises(pol.PolicyError, match="no recipe 'bigger'"):
        pol.set_value(store, "recipe", "bigger")
    chosen = pol.set_value(store, "recipe", "actions")
    assert job_hyper(chosen, "sft").action_weight == 3.0
    assert job_hyper(chosen, "dpo") is None  # a refining job keeps its own recipe
    over = pol.set_value(store, "hyper", '{"action_weight": 5.0, "learning_rate": 1e-4}')
    hyper = job_hyper(over.model_copy(update={"max_steps": 7}), "sft")
    assert (hyper.action_weight, hyper.learning_rate, hyper.max_steps) == (5.0, 1e-4, 7)

"""Dataset fixtures: a folder of session files, and a build through the real worker subprocess."""
from __future__ import annotations

import pytest

from app.core.datasets.config import BuildConfig, Filters


@pytest.fixture
def agent_dir(tmp_path):
    path = tmp_path / "agent" / "-home-me-proj"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def build(store, tiny_model):
    """build(**config) -> (Outcome, BuiltDataset row or None): the worker subprocess renders with the tiny model."""
    from app.core.datasets.catalog import Registry
    from app.core.datasets.runs import start_build

    def run(**over):
        filters = Filters(**over.pop("filters", {}))
        config = BuildConfig(base_model=str(tiny_model), max_length=over.pop("max_length", 512), filters=filters,
                             **over)
        outcome = start_build(store, config).finish()
        return outcome, Registry(store).get(outcome.identical_to or outcome.name) if outcome.ok else None

    return run

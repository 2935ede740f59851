"""Ship fixtures: a tiny model llama.cpp can convert that answers and stops (pre-trained once per session)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def shippable_model(tmp_path_factory):
    from tests.tiny_model import build_shippable

    return build_shippable(tmp_path_factory.mktemp("shippable") / "model")

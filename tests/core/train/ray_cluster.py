"""One real local Ray head per test process (tests/ray_head.py: loopback, 1 CPU), shared by every module that needs
one — tests/core/train/test_ray_backend.py and tests/cli/test_cli_ray.py — and stopped when the session ends:
starting a head costs seconds. Its one CPU runs one training job at a time, so a test ends the jobs it started."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests import ray_head

_address: dict[str, str] = {}


def shared(request: pytest.FixtureRequest) -> str:
    """The head's job-submission address (started on first use; skips the test where Ray is not installed)."""
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'nightschool[remote]'")
    if "head" not in _address:
        tmp = Path("/tmp") / f"ns-ray-{os.getpid()}"  # Ray's socket paths must stay short
        shutil.rmtree(tmp, ignore_errors=True)
        request.config.add_cleanup(lambda: ray_head.stop(tmp))
        _address["head"] = ray_head.start(tmp)
    return _address["head"]

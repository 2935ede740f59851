"""Shared fixtures: a private data dir per test, a tiny real model, a learnable chat file, fast hyper-parameters."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.core.train.spec import Hyper  # noqa: E402
from tests.pg import pg_server, pg_url  # noqa: E402,F401 - fixtures (the store on PostgreSQL)
from tests.tiny_model import build, chat_records  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared"


def pytest_configure(config) -> None:
    """One fixed temporary root unless --basetemp names another: stored session ids come from transcript paths, and
    their stable-hash splits with them, so the same paths make a run here and a run in CI draw the same splits.
    pytest empties this root at the start, so a pytest that a test runs (it inherits NIGHTSCHOOL_TESTS_ROOT) keeps
    pytest's own numbered folders, and two runs at once in one checkout need their own --basetemp."""
    if config.option.basetemp is None and not os.environ.get("NIGHTSCHOOL_TESTS_ROOT"):
        import tempfile

        config.option.basetemp = str(Path(tempfile.gettempdir()) / "nightschool-tests")
        os.environ["NIGHTSCHOOL_TESTS_ROOT"] = config.option.basetemp


def fast_hyper(**over) -> Hyper:
    """Hyper-parameters that make the tiny model learn visibly in a few seconds."""
    base = dict(max_steps=30, epochs=100, learning_rate=2e-2, lora_r=8, lora_alpha=16, batch_size=4, grad_accum=1,
                max_length=128, warmup=0.0, save_steps=10, logging_steps=1)
    base.update(over)
    return Hyper(**base)


@pytest.fixture(autouse=True)
def ns_home(tmp_path, monkeypatch, request) -> Path:
    """A private data dir; engines a test leaves running (e.g. after a failed assertion) are killed after it.
    NIGHTSCHOOL_TEST_STORE=postgresql runs a test's store on a fresh PostgreSQL database instead (tests/pg.py)."""
    home = tmp_path / "home"
    monkeypatch.setenv("NIGHTSCHOOL_HOME", str(home))
    if os.environ.get("NIGHTSCHOOL_TEST_STORE") == "postgresql":
        monkeypatch.setenv("NIGHTSCHOOL_DATABASE_URL", request.getfixturevalue("pg_url"))
    monkeypatch.setenv("NIGHTSCHOOL_CONFIG", str(tmp_path / "config"))  # the teacher's key file: never the real home
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")  # nor the developer's keyring
    monkeypatch.setenv("NIGHTSCHOOL_NO_FIRST_RUN", "1")  # no first-run wizard over windows the tests build
    yield home
    kill_engines_under(home)


@pytest.fixture(autouse=True)
def capture_clock() -> None:
    """The capture helpers' record timestamps start again for every test: a test writes the same records whatever ran
    before it (a counter shared across tests made them depend on the order and the selection of tests)."""
    import itertools

    from tests.core.capture import helpers

    helpers._clock = itertools.count()


def kill_engines_under(home: Path) -> None:
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "-m engine" in cmd and str(home) in cmd:
            proc.kill()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def shippable_model(tmp_path_factory) -> Path:
    """A tiny model llama.cpp can convert that answers and stops (pre-trained once per session; the ship and judge
    tests share it)."""
    from tests.tiny_model import build_shippable

    return build_shippable(tmp_path_factory.mktemp("shippable") / "model")


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def chat_file(tmp_path) -> Path:
    return write_jsonl(tmp_path / "chat.jsonl", chat_records(24))


@pytest.fixture
def keyless(tmp_path, monkeypatch) -> Path:
    """No OS keyring (keyring's fail backend) and no key in the environment: the teacher's key goes to a 0600 file in
    this test's config dir (ns_home points NIGHTSCHOOL_CONFIG there), never the real home. Returns that dir."""
    import keyring
    from keyring.backends import fail

    monkeypatch.delenv("NIGHTSCHOOL_TEACHER_KEY", raising=False)
    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    yield tmp_path / "config"
    keyring.set_keyring(before)


@pytest.fixture
def store():
    from app.core.base.store import Store

    s = Store()
    yield s
    s.close()


@pytest.fixture
def manager(store):
    from app.core.train.jobs import JobManager

    return JobManager(store)


BLIND_POLICY = {"judge_contexts": 16, "judge_examples": 2}  # the blind test's evaluation: small
BLIND_TOKENS = 32  # an answer's tokens (`nightschool judge blind --max-new-tokens 32`): the tool grammar is slow


@pytest.fixture(scope="session")
def blind_school(tmp_path_factory, shippable_model):
    """A data dir where 24 captured sessions are built for the shippable tiny model (its policy's base model) into a
    held-out set, and the model's answers to it evaluated with the served decoding (llama.cpp, the tool grammar) as
    the blind test asks for them: the real evaluation path, once per test session. Tests take a copy of its store
    (`blind_store`); its files (the dataset, the evaluation) are shared, read only."""
    from app.core.base.store import Store
    from app.core.judge.blind.draw import answers
    from app.core.judge.records import Target
    from app.core.runtime.school import policy
    from tests.core.judge.conftest import build_heldout, builder_for

    root = tmp_path_factory.mktemp("blind")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NIGHTSCHOOL_HOME", str(root / "home"))
        store = Store()
        try:
            for key, value in {**BLIND_POLICY, "base_model": str(shippable_model)}.items():
                policy.set_value(store, key, value)
            agent = root / "agent" / "-home-me-proj"
            agent.mkdir(parents=True)
            build_heldout(store, agent, builder_for(store, shippable_model))
            settings = policy.judge_settings(policy.load(store), max_new_tokens=BLIND_TOKENS)
            found = answers(store, Target(str(shippable_model)), settings)
            assert len(found.rows) >= 12 and not found.reused
        finally:
            store.close()
    return root / "home"


@pytest.fixture
def blind_store(blind_school, ns_home):
    """This test's store: a copy of the blind school's database in the test's own data dir."""
    import sqlite3

    from app.core.base import paths
    from app.core.base.store import Store

    src, dst = sqlite3.connect(blind_school / "nightschool.db"), sqlite3.connect(paths.db_path())
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    store = Store()
    yield store
    store.close()

"""`nightschool connect AGENT` on a fresh HOME holding a copy of a real config example from each tool's docs
(fixtures/, sources in fixtures/SOURCES.md): --dry-run writes nothing, connect merges the entry (everything else kept)
after a backup, the live check reaches the endpoint, and disconnect restores every file byte for byte (permissions
too; what connect created is deleted). The endpoint is a stand-in for the served student (standin.py)."""
from __future__ import annotations

import json
import shutil
import stat
import tomllib
from pathlib import Path

import pytest
import yaml

from app.cli.main import main
from app.core.ship import serving
from app.core.ship.connect import connection
from app.core.ship.connect.endpoint import KEY_ENV, STUDENT_MODEL
from app.core.ship.errors import ShipError
from tests.core.ship.connect.standin import StandInStudent

FIXTURES = Path(__file__).parent / "fixtures"
CASES = [("codex", "codex.config.toml", ".codex/config.toml"),
         ("opencode", "opencode.json", ".config/opencode/opencode.json"),
         ("aider", "sample.aider.conf.yml", ".aider.conf.yml"),
         ("aider", "keys.aider.conf.yml", ".aider.conf.yml"),
         ("continue", "continue.config.yaml", ".continue/config.yaml")]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh HOME, and none of the tools' own location variables, so each tool's default place is under it."""
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.setenv("HOME", str(user))
    for var in ("CODEX_HOME", "XDG_CONFIG_HOME", "CONTINUE_GLOBAL_DIR"):
        monkeypatch.delenv(var, raising=False)
    return user


@pytest.fixture
def student():
    served = StandInStudent()
    yield served
    served.close()


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under root: its bytes and permissions (folders too, by name)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>", stat.S_IMODE(p.stat().st_mode))
            for p in sorted(root.rglob("*"))}


def place(home: Path, fixture: str, where: str) -> bytes:
    target = home / where
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURES / fixture, target)
    return target.read_bytes()


def kept_lines(original: str, written: str) -> None:
    """Every line of the original is still there, in order (comments included)."""
    lines = iter(written.splitlines())
    missing = [line for line in original.splitlines() if line not in lines]
    assert not missing, missing


def check_merged(agent: str, fixture: str, home: Path, url: str) -> None:
    """The tool's entry is in its file as its docs describe it, and what was there before is still there."""
    original = (FIXTURES / fixture).read_text(encoding="utf-8")
    if agent == "codex":
        written = (home / ".codex/config.toml").read_text()
        config = tomllib.loads(written)
        assert config["model_providers"]["nightschool"] == {
            "name": "Nightschool student", "base_url": url, "env_key": KEY_ENV, "wire_api": "responses",
            "env_key_instructions": f'export {KEY_ENV}="$(cat {serving.serve_dir() / "api_key"})"'}
        before = tomllib.loads(original)
        assert config["model_providers"]["proxy"] == before["model_providers"]["proxy"]
        assert {k: v for k, v in config.items() if k != "model_providers"} == {
            k: v for k, v in before.items() if k != "model_providers"}
        kept_lines(original, written)
        profile = tomllib.loads((home / ".codex/nightschool.config.toml").read_text())
        assert profile == {"model_provider": "nightschool", "model": STUDENT_MODEL}
    elif agent == "opencode":
        config = json.loads((home / ".config/opencode/opencode.json").read_text())
        assert config["provider"]["myprovider"] == json.loads(original)["provider"]["myprovider"]
        ours = config["provider"]["nightschool"]
        assert ours["npm"] == "@ai-sdk/openai-compatible" and ours["options"] == {
            "baseURL": url, "apiKey": "{env:" + KEY_ENV + "}"} and STUDENT_MODEL in ours["models"]
    elif agent == "aider":
        written = (home / ".aider.conf.yml").read_text()
        kept_lines(original, written)
        config = yaml.safe_load(written)
        assert config["model"] == f"openai/{STUDENT_MODEL}" and config["openai-api-base"] == url
        assert config.get("api-key") == (yaml.safe_load(original) or {}).get("api-key")
    else:
        written = (home / ".continue/config.yaml").read_text()
        kept_lines(original, written)
        models = yaml.safe_load(written)["models"]
        assert models[0] == yaml.safe_load(original)["models"][0]
        assert models[1] == {"name": "Nightschool student", "provider": "openai", "model": STUDENT_MODEL,
                             "apiBase": url, "apiKey": "${{ secrets." + KEY_ENV + " }}",
                             "roles": ["chat", "edit", "apply"], "capabilities": ["tool_use"]}
        env = home / ".continue/.env"
        assert env.read_text() == f"{KEY_ENV}={serving.api_key()}\n"
        assert stat.S_IMODE(env.stat().st_mode) == 0o600  # the one file holding the key: this user only


@pytest.mark.parametrize("agent, fixture, where", CASES, ids=[c[1] for c in CASES])
def test_dry_run_connect_and_disconnect_on_a_real_config_example(home, student, agent, fixture, where):
    original = place(home, fixture, where)
    before = snapshot(home)

    dry = connection.connect(agent, dry_run=True)
    assert snapshot(home) == before  # nothing written, no backup
    assert not connection.is_connected(agent)
    target = dry.plan.files[0]
    assert target["path"] == str(home / where) and target["action"] == "modify"
    assert target["backup"] == str(home / (where + ".nightschool-backup"))

    done = connection.connect(agent)
    assert done.written and connection.is_connected(agent)
    assert (home / (where + ".nightschool-backup")).read_bytes() == original
    check_merged(agent, fixture, home, student.url)
    assert done.check.ok and done.check.tool_call == "run_command", done.check
    wire = "/v1/responses" if agent == "codex" else "/v1/chat/completions"
    assert student.received[-1]["path"] == wire and student.received[-1]["body"]["model"] == STUDENT_MODEL
    assert student.received[-1]["body"]["tools"]  # a tool-calling request, as the tool sends one
    key = serving.api_key()
    assert key not in json.dumps(done.payload())  # what is shown never holds the key
    holders = [p for p in home.rglob("*") if p.is_file() and key in p.read_text(errors="replace")]
    assert holders == ([home / ".continue/.env"] if agent == "continue" else [])

    restored = connection.disconnect(agent)
    assert restored[0] == {"path": str(home / where), "action": "restored",
                           "from": str(home / (where + ".nightschool-backup"))}
    assert snapshot(home) == before  # byte-identical, same permissions; what connect created is gone
    assert not connection.is_connected(agent)


def test_codex_from_the_command_line_on_a_fresh_home(home, student, capsys):
    """The must-show: `nightschool connect codex --dry-run` / `connect` / `disconnect` with the docs' config."""
    original = place(home, "codex.config.toml", ".codex/config.toml")
    key = serving.api_key()

    assert main(["connect", "codex", "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert "Nothing written (--dry-run)." in said and "modify ~/.codex/config.toml" in said
    assert "create ~/.codex/nightschool.config.toml" in said and "[model_providers.nightschool]" in said
    assert sorted(p.name for p in (home / ".codex").iterdir()) == ["config.toml"]

    assert main(["connect", "codex"]) == 0
    said = capsys.readouterr().out
    assert f'export {KEY_ENV}="$(cat ' in said and "codex --profile nightschool" in said
    assert "Live check: ✓ POST /v1/responses with a tool answered a call of run_command" in said
    assert key not in said
    assert sorted(p.name for p in (home / ".codex").iterdir()) == [
        "config.toml", "config.toml.nightschool-backup", "nightschool.config.toml"]
    assert (home / ".codex/config.toml.nightschool-backup").read_bytes() == original

    assert main(["connect", "--json"]) == 0
    listed = {c["agent"]: c for c in json.loads(capsys.readouterr().out)}
    assert listed["codex"]["connected"] and not listed["aider"]["connected"]

    assert main(["disconnect", "codex", "--json"]) == 0
    assert [f["action"] for f in json.loads(capsys.readouterr().out)["files"]] == ["restored", "deleted"]
    assert sorted(p.name for p in (home / ".codex").iterdir()) == ["config.toml"]
    assert (home / ".codex/config.toml").read_bytes() == original
    assert main(["disconnect", "codex"]) == 2
    assert "Codex CLI is not connected" in capsys.readouterr().err


def test_codex_check_says_the_server_lacks_the_responses_api(home):
    """A server without the Responses API (an older one) answers /v1/responses 404: the check says that is what
    Codex needs, and how to get it (restart the server)."""
    served = StandInStudent(responses=False)
    try:
        done = connection.connect("codex")
    finally:
        served.close()
    assert done.written and not done.check.ok and done.check.status == 404
    assert "Codex speaks only the Responses API" in done.check.why and "nightschool serve start" in done.check.why


def test_a_stopped_server_is_said_and_the_files_are_written_anyway(home):
    done = connection.connect("aider")
    assert done.written and not done.check.ok
    assert "not running" in done.check.sentence() and "nightschool serve start" in done.check.sentence()
    connection.disconnect("aider")
    assert list(home.iterdir()) == []  # the file connect made is gone


def test_connecting_again_keeps_the_first_backup(home, student):
    original = place(home, "opencode.json", ".config/opencode/opencode.json")
    connection.connect("opencode", check=False)
    connection.connect("opencode", check=False)
    backups = list((home / ".config/opencode").glob("*nightschool-backup*"))
    assert [b.read_bytes() for b in backups] == [original]
    connection.disconnect("opencode")
    assert (home / ".config/opencode/opencode.json").read_bytes() == original


def test_a_file_changed_after_connect_is_restored_only_with_force(home):
    original = place(home, "continue.config.yaml", ".continue/config.yaml")
    connection.connect("continue", check=False)
    config = home / ".continue/config.yaml"
    edited = config.read_text() + "rules:\n  - Always write tests\n"
    config.write_text(edited)
    with pytest.raises(ShipError, match="changed after nightschool connect continue wrote it"):
        connection.disconnect("continue")
    assert config.read_text() == edited and connection.is_connected("continue")  # nothing restored
    connection.disconnect("continue", force=True)
    assert config.read_bytes() == original
    assert (home / ".continue/config.yaml.nightschool-edited").read_text() == edited  # the edit is kept aside


def test_the_continue_env_keeps_its_lines_and_gets_its_permissions_back(home):
    env = home / ".continue/.env"
    env.parent.mkdir()
    env.write_text("ANTHROPIC_API_KEY=keep-me\n")
    env.chmod(0o644)
    connection.connect("continue", check=False)
    assert env.read_text() == f"ANTHROPIC_API_KEY=keep-me\n{KEY_ENV}={serving.api_key()}\n"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    connection.disconnect("continue")
    assert env.read_text() == "ANTHROPIC_API_KEY=keep-me\n" and stat.S_IMODE(env.stat().st_mode) == 0o644


@pytest.mark.parametrize("agent, fixture, where, why", [
    ("opencode", "opencode.jsonc", ".config/opencode/opencode.json", "not plain JSON"),
    ("continue", "continue.config.yaml", ".continue/config.json", "legacy"),
    ("codex", "opencode.json", ".codex/config.toml", "not valid TOML")])
def test_a_file_that_cannot_be_merged_safely_is_refused_with_the_block_to_add(home, agent, fixture, where, why):
    place(home, fixture, where)
    before = snapshot(home)
    with pytest.raises(ShipError, match="cannot be merged safely, so nothing was written") as refused:
        connection.connect(agent, check=False)
    assert why in refused.value.why and "add this to it by hand" in refused.value.fix
    assert snapshot(home) == before and not connection.is_connected(agent)

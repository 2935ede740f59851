"""Claude Code hook install/uninstall (idempotent, reversible, backed up, refusing bad JSON) and hook stdin parsing."""
from __future__ import annotations

import copy
import io
import json
import os
from pathlib import Path

import pytest

from app.core.capture.hooks import (
    BACKUP_SUFFIX,
    HOOK_EVENTS,
    HooksError,
    install,
    is_ours,
    read_hook_input,
    settings_path,
    status,
    uninstall,
)

CMD = "/opt/venv/bin/nightschool"
USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"], "deny": []},
    "env": {"FOO": "bar"},
    "someFutureKey": {"nested": [1, 2, {"x": None}]},
    "hooks": {
        "Stop": [{"matcher": "", "hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}],
    },
}


@pytest.fixture(autouse=True)
def no_real_home(tmp_path, monkeypatch):
    """Every test runs with HOME and CLAUDE_CONFIG_DIR pointing into tmp_path."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


def read_json(path: Path):
    return json.loads(path.read_text())


def ours(data: dict, event: str) -> list[dict]:
    return [h for g in data.get("hooks", {}).get(event, []) for h in g["hooks"] if is_ours(h)]


# --- settings_path -------------------------------------------------------------------------------------------------

def test_settings_path_defaults_to_home_claude(tmp_path):
    assert settings_path() == tmp_path / "home" / ".claude" / "settings.json"


def test_settings_path_honours_claude_config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cfg"))
    assert settings_path() == tmp_path / "cfg" / "settings.json"


def test_install_without_path_uses_settings_path(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cfg"))
    change = install(CMD)
    assert change.path == tmp_path / "cfg" / "settings.json"
    assert status() == {event: True for event in HOOK_EVENTS}


# --- install -------------------------------------------------------------------------------------------------------

def test_install_on_missing_file_and_dir(tmp_path):
    path = tmp_path / "home" / ".claude" / "settings.json"
    change = install(CMD, path)
    assert change.added == list(HOOK_EVENTS) and change.already == [] and change.backup is None
    data = read_json(path)
    for event in HOOK_EVENTS:
        assert ours(data, event) == [{"type": "command", "command": f"{CMD} capture hook", "timeout": 30}]
    assert status(path) == {"Stop": True, "SessionEnd": True}
    assert not path.with_name(path.name + BACKUP_SUFFIX).exists()
    assert [p.name for p in path.parent.iterdir()] == ["settings.json"]  # no temp file left behind


def test_install_keeps_user_hooks_and_other_keys(tmp_path):
    path = write_json(tmp_path / "settings.json", USER_SETTINGS)
    install(CMD, path)
    data = read_json(path)
    for key in ("model", "permissions", "env", "someFutureKey"):
        assert data[key] == USER_SETTINGS[key]
    assert data["hooks"]["Stop"][0] == USER_SETTINGS["hooks"]["Stop"][0]
    assert data["hooks"]["PreToolUse"] == USER_SETTINGS["hooks"]["PreToolUse"]
    assert len(ours(data, "Stop")) == 1 and len(ours(data, "SessionEnd")) == 1


def test_install_twice_leaves_one_entry_per_event(tmp_path):
    path = write_json(tmp_path / "settings.json", USER_SETTINGS)
    install(CMD, path)
    first = path.read_bytes()
    change = install(CMD, path)
    assert change.added == [] and change.already == list(HOOK_EVENTS) and not change.changed
    assert path.read_bytes() == first
    assert all(len(ours(read_json(path), event)) == 1 for event in HOOK_EVENTS)


def test_install_with_a_new_command_replaces_the_old_entry(tmp_path):
    path = tmp_path / "settings.json"
    install("/old/venv/bin/nightschool", path)
    change = install("'/new place/bin/nightschool'", path)
    assert change.added == list(HOOK_EVENTS)
    for event in HOOK_EVENTS:
        assert [h["command"] for h in ours(read_json(path), event)] == ["'/new place/bin/nightschool' capture hook"]


def test_install_collapses_duplicate_entries_of_ours(tmp_path):
    entry = {"hooks": [{"type": "command", "command": f"{CMD} capture hook", "timeout": 30}]}
    path = write_json(tmp_path / "settings.json", {"hooks": {"Stop": [entry, copy.deepcopy(entry)]}})
    assert install(CMD, path).added == list(HOOK_EVENTS)
    assert len(ours(read_json(path), "Stop")) == 1


def test_install_refuses_a_command_it_could_not_recognise_again(tmp_path):
    path = tmp_path / "settings.json"
    with pytest.raises(HooksError, match="nightschool"):
        install("/usr/bin/python -m app.cli.main", path)
    with pytest.raises(HooksError):
        install("", path)
    assert not path.exists()


def test_install_follows_a_symlinked_settings_file(tmp_path):
    real = write_json(tmp_path / "dotfiles" / "settings.json", {"model": "opus"})
    link = tmp_path / "claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)
    install(CMD, link)
    assert link.is_symlink()
    assert read_json(real)["model"] == "opus" and status(link)["Stop"]


def test_install_keeps_the_file_mode(tmp_path):
    path = write_json(tmp_path / "settings.json", {"model": "opus"})
    os.chmod(path, 0o640)
    install(CMD, path)
    assert path.stat().st_mode & 0o777 == 0o640


# --- backup --------------------------------------------------------------------------------------------------------

def test_backup_is_made_once_before_the_first_change(tmp_path):
    path = write_json(tmp_path / "settings.json", USER_SETTINGS)
    original = path.read_bytes()
    backup = path.with_name("settings.json" + BACKUP_SUFFIX)
    assert install(CMD, path).backup == backup
    assert backup.read_bytes() == original
    assert install("/other/nightschool", path).backup is None
    assert uninstall(path).backup is None
    assert backup.read_bytes() == original


# --- uninstall -----------------------------------------------------------------------------------------------------

def test_uninstall_restores_the_users_content(tmp_path):
    path = write_json(tmp_path / "settings.json", USER_SETTINGS)
    install(CMD, path)
    change = uninstall(path)
    assert change.removed == list(HOOK_EVENTS)
    assert read_json(path) == USER_SETTINGS
    assert status(path) == {"Stop": False, "SessionEnd": False}


def test_uninstall_removes_the_containers_install_created(tmp_path):
    path = write_json(tmp_path / "settings.json", {"model": "opus"})
    install(CMD, path)
    uninstall(path)
    assert read_json(path) == {"model": "opus"}


def test_uninstall_keeps_a_user_hook_sharing_a_group_with_ours(tmp_path):
    group = {"hooks": [{"type": "command", "command": "mine.sh"},
                       {"type": "command", "command": f"{CMD} capture hook"}]}
    path = write_json(tmp_path / "settings.json", {"hooks": {"Stop": [group]}})
    assert uninstall(path).removed == ["Stop"]
    assert read_json(path) == {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "mine.sh"}]}]}}


def test_uninstall_when_nothing_is_installed_is_a_no_op(tmp_path):
    path = write_json(tmp_path / "settings.json", USER_SETTINGS)
    before = path.read_bytes()
    change = uninstall(path)
    assert change.removed == [] and not change.changed
    assert path.read_bytes() == before
    assert not path.with_name(path.name + BACKUP_SUFFIX).exists()


def test_uninstall_on_a_missing_file_creates_nothing(tmp_path):
    path = tmp_path / "nowhere" / "settings.json"
    assert uninstall(path).removed == []
    assert not path.parent.exists()


# --- refusing files it cannot parse --------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ['{"model": "opus",', "[1, 2]", '"just a string"', '{"hooks": []}',
                                  '{"hooks": {"Stop": {"oops": 1}}}'])
def test_install_refuses_unparsable_or_odd_settings_and_leaves_them(tmp_path, text):
    path = tmp_path / "settings.json"
    path.write_text(text)
    with pytest.raises(HooksError) as info:
        install(CMD, path)
    assert str(path) in str(info.value) and "try again" in str(info.value)
    assert path.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]


def test_uninstall_and_status_refuse_invalid_json(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{not json")
    with pytest.raises(HooksError, match="not valid JSON"):
        uninstall(path)
    with pytest.raises(HooksError, match="not valid JSON"):
        status(path)
    assert path.read_text() == "{not json"


def test_blank_settings_file_counts_as_empty(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("\n")
    assert install(CMD, path).added == list(HOOK_EVENTS)


# --- hook stdin ----------------------------------------------------------------------------------------------------

def test_read_hook_input_good(tmp_path):
    payload = {"session_id": "abc-123", "transcript_path": str(tmp_path / "t.jsonl"), "cwd": str(tmp_path),
               "hook_event_name": "Stop", "stop_hook_active": False}
    found = read_hook_input(io.StringIO(json.dumps(payload)))
    assert found.session_id == "abc-123"
    assert found.transcript_path == tmp_path / "t.jsonl"
    assert found.cwd == tmp_path
    assert found.event == "Stop"


def test_read_hook_input_binary_stream_and_missing_fields():
    found = read_hook_input(io.BytesIO(b'{"session_id": "s1"}'))
    assert found.session_id == "s1" and found.transcript_path is None and found.cwd is None and found.event is None


class Broken:
    def read(self, *_):
        raise OSError("closed")


@pytest.mark.parametrize("stream", [io.StringIO(""), io.StringIO("not json"), io.StringIO("[1]"),
                                    io.BytesIO(b"\xff\xfe garbage"), io.StringIO('{"session_id": 5}'),
                                    io.StringIO('{"cwd": "/tmp"}'), io.StringIO("[" * 100000), Broken(), None])
def test_read_hook_input_garbage_is_none(stream):
    assert read_hook_input(stream) is None

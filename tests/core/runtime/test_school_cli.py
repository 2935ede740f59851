"""`nightschool school …` and every listing's `--json`: a malformed policy value exits 2 with what is accepted, `now`
is refused when there is nothing new to learn and otherwise names a cycle that `history` lists, `status` says what
its session count means, and each --json prints one JSON document (nothing else) on an empty data dir."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.main import main
from tests.core.datasets.helpers import ingest, write_session

REPO = Path(__file__).resolve().parents[3]


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args], cwd=REPO,
                          env={**env, "NIGHTSCHOOL_HOME": str(home)}, capture_output=True, text=True, timeout=120)


def test_a_malformed_policy_value_exits_2_with_the_accepted_values(ns_home):
    bad = cli(ns_home, "school", "policy", "deploy", "sometimes")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "deploy" in bad.stderr and "auto | ask | never" in bad.stderr

    good = cli(ns_home, "school", "policy", "deploy", "auto", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["deploy"] == "auto"
    assert json.loads(cli(ns_home, "school", "policy", "--json").stdout)["deploy"] == "auto"


def test_where_a_cycle_trains_is_a_policy_key():
    from app.core.runtime.school.policy import Policy

    assert Policy().train_on == "default"  # the queue's train.backend setting, else here
    assert Policy(train_on="ray").train_on == "ray"
    with pytest.raises(ValueError, match="skypilot"):
        Policy(train_on="cloud")


def test_now_is_refused_with_nothing_to_learn_then_names_a_cycle_that_history_lists(ns_home, store, tmp_path,
                                                                                      capsys):
    assert main(["school", "now"]) == 2  # an empty data dir: nothing new to learn, no cycle recorded
    said = capsys.readouterr()
    assert said.out == "" and "nothing new to learn" in said.err and "No captured session is new" in said.err
    assert main(["school", "history", "--json"]) == 0 and json.loads(capsys.readouterr().out) == []

    write_session(tmp_path / "agent", 0)
    ingest(store, tmp_path / "agent")
    assert main(["school", "now", "--json"]) == 0
    started = json.loads(capsys.readouterr().out)
    assert isinstance(started["cycle"], int) and started["created"] and not started["runtime"]

    assert main(["school", "now"]) == 0  # the running one is named again, not a second cycle
    assert capsys.readouterr().out.startswith(f"cycle {started['cycle']}: already running")

    assert main(["school", "history", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in listed] == [started["cycle"]] and listed[0]["state"] == "running"

    assert main(["school", "show", str(started["cycle"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == started["cycle"]
    assert main(["school", "status"]) == 0
    text = capsys.readouterr().out
    assert f"cycle {started['cycle']} is running at stage building" in text and "nightschool daemon" in text
    assert "new = captured sessions no cycle of the built-in SmolLM2 has trained on yet" in text


LISTINGS = [["jobs"], ["queue", "list"], ["checkpoints"], ["capture", "status"], ["dataset", "list"], ["exports"],
            ["deployments"], ["school", "status"], ["school", "history"], ["school", "policy"], ["daemon", "status"]]


@pytest.mark.parametrize("command", LISTINGS, ids=" ".join)
def test_each_json_listing_parses_on_an_empty_data_dir(ns_home, capsys, command):
    ns_home.mkdir(parents=True, exist_ok=True)
    (ns_home / "capture.json").write_text(json.dumps({"roots": {}}), encoding="utf-8")
    assert main([*command, "--json"]) == 0
    out = capsys.readouterr().out
    assert isinstance(json.loads(out), (list, dict))

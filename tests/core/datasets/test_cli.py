"""`nightschool dataset build | list | show | validate` end to end (real worker subprocesses)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from app.cli.main import main
from tests.core.datasets.helpers import ingest, write_session


def test_build_list_show_and_validate(store, agent_dir, tiny_model, capsys):
    for i in range(6):
        write_session(agent_dir, i, error_first=i % 2 == 0)
    ingest(store, agent_dir)
    assert main(["dataset", "build", "--name", "cli", "--model", str(tiny_model), "--max-length", "1024",
                 "--test", "0", "--val", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "cli: " in out and "filters removed:" in out and "fingerprint" in out

    assert main(["dataset", "list"]) == 0
    assert "cli" in capsys.readouterr().out

    assert main(["dataset", "show", "cli", "--example", "0"]) == 0
    shown = capsys.readouterr().out
    assert "[[" in shown and "<|im_start|>user" in shown  # trained text marked, the prompt not

    assert main(["dataset", "validate", "cli"]) == 0  # STANDARD + DEEP on the built dataset
    assert "problems: none" in capsys.readouterr().out

    folder = Path(store.path).parent / "datasets" / "cli"
    train = folder / "train.jsonl"
    os.chmod(train, stat.S_IWUSR | stat.S_IRUSR)
    train.write_text(train.read_text().replace("tests pass", "tests PASS"))
    assert main(["dataset", "validate", "cli", "--quick"]) == 1
    assert "changed after the build" in capsys.readouterr().out


def test_validate_a_file_catches_leakage_secrets_and_unknown_schemas(tmp_path, capsys):
    answer = "Use a context manager so the file is closed even when parsing fails halfway."
    records = [
        {"messages": [{"role": "user", "content": f"How do I close files safely? (answer: {answer})"},
                      {"role": "assistant", "content": answer}]},
        {"messages": [{"role": "user", "content": "deploy it"},
                      {"role": "assistant", "content": "Run: export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}]},
        {"messages": [{"role": "user", "content": "fine"}, {"role": "assistant", "content": "Good."}]},
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["dataset", "validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "3 examples checked" in out and "leakage (1)" in out and "secret (1)" in out
    assert "line 1" in out and "line 2" in out and "wJalrXUtnFEMI" not in out

    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"question": "q", "answer": "a"}\n' * 3)
    assert main(["dataset", "validate", str(odd)]) == 1
    assert "spec (1)" in capsys.readouterr().out

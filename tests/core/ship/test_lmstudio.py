"""LM Studio export: its folder layout, hard link or copy, idempotence, refusals, the models folder it uses."""
from __future__ import annotations

import os
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from app.core.ship import lmstudio
from app.core.ship.errors import ShipError


@pytest.fixture
def gguf(tmp_path) -> Path:
    path = tmp_path / "export" / "smol.q8_0.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF" + bytes(range(256)) * 8)
    return path


def no_hard_links(monkeypatch):
    def refuse(*_):
        raise OSError("hard links not supported")
    monkeypatch.setattr(lmstudio.os, "link", refuse)


def test_layout_and_hard_link(tmp_path, gguf):
    dest = lmstudio.export(gguf, "nightschool-smol", root=tmp_path / "models")
    assert dest == tmp_path / "models" / "nightschool" / "nightschool-smol-GGUF" / "nightschool-smol-Q8_0.gguf"
    assert dest.read_bytes() == gguf.read_bytes() and os.path.samefile(dest, gguf)  # same filesystem: a link


def test_copy_when_no_hard_link_and_no_part_file_left(tmp_path, gguf, monkeypatch):
    no_hard_links(monkeypatch)
    dest = lmstudio.export(gguf, "smol", root=tmp_path / "models", quant="f16")
    assert dest.name == "smol-F16.gguf" and dest.read_bytes() == gguf.read_bytes()
    assert not os.path.samefile(dest, gguf) and os.listdir(dest.parent) == [dest.name]


def test_same_content_already_there_is_left_alone(tmp_path, gguf, monkeypatch):
    no_hard_links(monkeypatch)
    first = lmstudio.export(gguf, "smol", root=tmp_path)
    inode = first.stat().st_ino
    monkeypatch.setattr(lmstudio.shutil, "copyfile", lambda *_: pytest.fail("copied again"))
    assert lmstudio.export(gguf, "smol", root=tmp_path) == first and first.stat().st_ino == inode


def test_a_different_file_under_the_name_is_replaced(tmp_path, gguf):
    first = lmstudio.export(gguf, "smol", root=tmp_path / "m")
    newer = gguf.with_name("smol-v2.q8_0.gguf")
    newer.write_bytes(b"GGUF newer weights")
    assert lmstudio.export(newer, "smol", root=tmp_path / "m") == first
    assert first.read_bytes() == b"GGUF newer weights" and gguf.read_bytes() != first.read_bytes()


def test_refuses_a_file_that_is_not_gguf_or_missing(tmp_path):
    bad = tmp_path / "model.Q8_0.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ShipError, match="not a GGUF file"):
        lmstudio.export(bad, "smol", root=tmp_path / "m")
    with pytest.raises(ShipError, match="cannot be read"):
        lmstudio.export(tmp_path / "missing.Q8_0.gguf", "smol", root=tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_refuses_bad_names_and_missing_quant(tmp_path, gguf):
    with pytest.raises(ShipError, match="cannot name"):
        lmstudio.export(gguf, "../escape", root=tmp_path)
    plain = gguf.with_name("model.gguf")
    shutil.copyfile(gguf, plain)
    with pytest.raises(ShipError, match="quant="):
        lmstudio.export(plain, "smol", root=tmp_path)
    assert lmstudio.export(plain, "smol", root=tmp_path, quant="Q4_K_M").name == "smol-Q4_K_M.gguf"


def test_refuses_when_the_disk_lacks_space_for_a_copy(tmp_path, gguf, monkeypatch):
    no_hard_links(monkeypatch)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(lmstudio.shutil, "disk_usage", lambda _: usage(2**40, 2**40 - 1000, 1000))
    with pytest.raises(ShipError, match="Not enough disk space") as err:
        lmstudio.export(gguf, "smol", root=tmp_path / "m")
    assert "It needs 0.06 GiB" in str(err.value) and "0.00 GiB is free" in str(err.value)
    assert not list((tmp_path / "m").rglob("*.gguf*"))


def test_models_folder_env_override_and_defaults(tmp_path, gguf, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LMSTUDIO_MODELS", raising=False)
    assert lmstudio.default_root() == tmp_path / "home" / ".cache" / "lm-studio" / "models"
    (tmp_path / "home" / ".lmstudio").mkdir(parents=True)
    assert lmstudio.default_root() == tmp_path / "home" / ".lmstudio" / "models"
    monkeypatch.setenv("LMSTUDIO_MODELS", str(tmp_path / "elsewhere"))
    assert lmstudio.default_root() == tmp_path / "elsewhere"
    dest = lmstudio.export(gguf, "smol")
    assert dest == tmp_path / "elsewhere" / "nightschool" / "smol-GGUF" / "smol-Q8_0.gguf" and dest.is_file()

"""Finding llama.cpp's converter: extracted from the kept llama-cpp-python source when missing, a clear error (what,
why, how to get it) when there is no source either; unknown quantizations refused before llama.cpp runs."""
from __future__ import annotations

import io
import tarfile

import pytest

from app.core.ship.errors import ShipError
from engine.workers import llama_tools


def fake_sdist(path, version: str):
    """A source archive with the layout of llama-cpp-python's (vendor/llama.cpp/…) holding stand-in scripts."""
    root = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in [("convert_hf_to_gguf.py", "print('hf')"), ("convert_lora_to_gguf.py", "print('lora')"),
                           ("gguf-py/gguf/__init__.py", ""), ("conversion/__init__.py", ""), ("README.md", "x"),
                           ("src/llama.cpp", "int main;")]:
            data = text.encode()
            info = tarfile.TarInfo(root + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_missing_converter_is_extracted_from_the_kept_source(tmp_path, monkeypatch):
    monkeypatch.setenv("NIGHTSCHOOL_LLAMA_TOOLS", str(tmp_path / "tools"))
    sdist = fake_sdist(tmp_path / f"llama_cpp_python-{llama_tools.version()}.tar.gz", llama_tools.version())
    monkeypatch.setattr(llama_tools, "_sdists", lambda: [sdist])
    script = llama_tools.converter()
    assert script == tmp_path / "tools" / "convert_hf_to_gguf.py" and script.read_text() == "print('hf')"
    assert (tmp_path / "tools" / "gguf-py" / "gguf" / "__init__.py").is_file()
    assert not (tmp_path / "tools" / "src").exists() and not (tmp_path / "tools" / "README.md").exists()


def test_no_converter_and_no_source_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("NIGHTSCHOOL_LLAMA_TOOLS", str(tmp_path / "tools"))
    monkeypatch.setattr(llama_tools, "_sdists", lambda: [])
    with pytest.raises(ShipError) as err:
        llama_tools.converter()
    text = str(err.value)
    assert "convert_hf_to_gguf.py is not installed" in text and "packaging/install.sh" in text


def test_unknown_quantization_is_refused(tmp_path):
    with pytest.raises(ShipError, match="unknown quantization"):
        llama_tools.quantize(tmp_path / "a.gguf", tmp_path / "b.gguf", "q3_weird")

"""Checkpoint sealing, torn detection and retention on real folders (no trainer needed)."""
from __future__ import annotations

from pathlib import Path

from app.core.train import checkpoints as ckpt


def _make(root: Path, step: int, eval_loss: float | None = None, seal: bool = True) -> Path:
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(bytes([step % 251]) * 1000)
    (folder / "optimizer.pt").write_bytes(b"opt" * step)
    (folder / "trainer_state.json").write_text('{"global_step": %d}' % step)
    if seal:
        ckpt.write_marker(folder, step, eval_loss=eval_loss, elapsed_s=step * 1.5, tokens=step * 100)
    return folder


def test_a_sealed_checkpoint_verifies_and_any_change_tears_it(tmp_path):
    folder = _make(tmp_path, 10, eval_loss=1.2)
    info = ckpt.verify(folder)
    assert info is not None and info.step == 10 and info.eval_loss == 1.2 and info.tokens == 1000
    (folder / "optimizer.pt").write_bytes(b"opt" * 9 + b"x")  # same size, other content
    assert ckpt.verify(folder) is None
    unsealed = _make(tmp_path, 20, seal=False)
    assert ckpt.verify(unsealed) is None
    (folder / "optimizer.pt").write_bytes(b"opt" * 10)
    assert ckpt.latest_good(tmp_path).step == 10  # the newer unsealed one is skipped


def test_set_aside_torn_removes_only_newer_torn_folders(tmp_path):
    _make(tmp_path, 4)
    old_torn = _make(tmp_path, 2, seal=False)
    new_torn = _make(tmp_path, 8, seal=False)
    assert ckpt.set_aside_torn(tmp_path) == [new_torn]
    assert old_torn.exists() and not new_torn.exists()


def test_retention_keeps_last_best_and_protected(tmp_path):
    losses = {2: 1.0, 4: 0.5, 6: 0.7, 8: 0.9, 10: 0.8, 12: 0.85}
    folders = {s: _make(tmp_path, s, eval_loss=v) for s, v in losses.items()}
    (folders[2] / ckpt.KEEP).write_text("deployed")
    torn = _make(tmp_path, 3, seal=False)
    deleted = ckpt.prune(tmp_path, keep_last=2)
    kept = sorted(c.step for c in ckpt.scan(tmp_path)[0])
    assert kept == [2, 4, 10, 12]  # protected, best (0.5), the last two
    assert set(deleted) == {folders[6], folders[8], torn}
    assert ckpt.best(ckpt.scan(tmp_path)[0]).step == 4

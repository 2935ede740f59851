"""Judging checkpoints: next-action agreement, tool-call validity, eval reports, the gate, the model registry."""

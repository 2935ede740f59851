"""What an export is asked to make (the export worker's spec) and the quantizations on offer."""
from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, Field

QUANTS = {
    "q4_k_m": "4-bit K-quant, medium (default: smallest that keeps quality)",
    "q5_k_m": "5-bit K-quant, medium",
    "q8_0": "8-bit (near lossless)",
    "f16": "16-bit float (no quantization)",
}
DEFAULT_QUANT = "q4_k_m"

# The export worker's stages, in order: the phase its progress events carry, shown as is by the GUI (one bar each,
# labelled with the name) and the CLI (one progress bar each).
STAGE_MERGE = "merge"  # the adapter merged into its base, saved as safetensors with the shipping template
STAGE_CONVERT = "convert"  # llama.cpp's converter: safetensors → f16 GGUF
STAGE_QUANTIZE = "quantize"  # llama.cpp's quantizer, once per quantization asked for
STAGE_LORA = "lora"  # the adapter alone as a LoRA GGUF (only with an adapter)
STAGE_SMOKE = "smoke test"  # every file loads, answers and stops
EXPORT_STAGES: tuple[str, ...] = (STAGE_MERGE, STAGE_CONVERT, STAGE_QUANTIZE, STAGE_LORA, STAGE_SMOKE)


class ExportConfig(BaseModel):
    """One checkpoint (or the base model) to GGUF: merged model in the chosen quantizations, optionally a LoRA GGUF."""

    label: str
    name: str = "model"  # file stem: <name>.<quant>.gguf
    base_model: str
    adapter: str | None = None  # the checkpoint's adapter folder; None exports the base model
    adapter_sha256: str | None = None
    quants: list[str] = Field(default_factory=lambda: [DEFAULT_QUANT])
    lora: bool = True  # also a LoRA-only GGUF (when there is an adapter)
    smoke: bool = True
    n_ctx: int = 2048

    def key(self) -> str:
        """Same checkpoint, same quantization, same code path → same export (reused instead of redone)."""
        data = {"base_model": self.base_model, "adapter_sha256": self.adapter_sha256, "lora": self.lora,
                "quants": sorted(self.quants), "v": 1}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

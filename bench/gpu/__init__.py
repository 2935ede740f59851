"""The GPU check's parts: what runs and measures, the model and data, the checks (bench/gpu_check.py runs them)."""

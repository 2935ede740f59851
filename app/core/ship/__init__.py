"""Shipping a checkpoint: export to GGUF, smoke test, serve, Ollama / LM Studio, deployments and rollback."""

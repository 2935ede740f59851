"""Training recipes run by the engine (one per job kind)."""

"""Core: domain, storage, protocol, jobs — pure Python, imports neither Qt nor the ML stack."""

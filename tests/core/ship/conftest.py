"""Ship fixtures: `shippable_model` (a tiny model llama.cpp can convert) lives in tests/conftest.py, shared with the
judge tests."""

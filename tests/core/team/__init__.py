"""Team mode tests."""

"""datafiles."""

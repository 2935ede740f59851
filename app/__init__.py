"""Nightschool application: core (no Qt, no torch), UI, CLI."""

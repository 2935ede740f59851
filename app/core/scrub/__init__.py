"""Scrubbing secrets and personal data out of text: one home, used by capture, datasets and the recorder."""

"""Capture: agent transcripts (each agent a row of capture/agents.py) read into one normalised session model."""

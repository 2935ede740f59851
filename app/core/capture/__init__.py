"""Capture: agent transcripts (Claude Code, Codex CLI, Gemini CLI) read into one normalised session model."""

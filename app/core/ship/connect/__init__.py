"""`nightschool connect AGENT`: the served student set up in agent CLIs and editors (Codex CLI, opencode, aider,
Continue) — one module per tool, `agents.AGENTS` the table, `connection` the steps, `edits` the backups and restore."""

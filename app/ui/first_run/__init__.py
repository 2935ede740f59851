"""The first-run wizard: agents, exclusions, policy, base model and engine (wizard, pages, training, work)."""

"""The Capture tab: sources, per-day charts, projects and sessions (controller, panel)."""

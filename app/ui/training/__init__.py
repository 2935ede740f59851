"""The Training tab: jobs, their alerts and live charts (controller, panel)."""

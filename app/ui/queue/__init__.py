"""The Queue tab: waiting and running jobs in order (controller, panel)."""

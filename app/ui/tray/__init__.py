"""The tray icon: the school's state at a glance (icon), in the window or as its own process (process)."""

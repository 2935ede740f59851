"""Qt user interface: main window, panel controllers, engine client glue."""

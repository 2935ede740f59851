"""Team mode: members scrub locally and ship their sessions to one server whose store pools the school."""

"""Tool calls: the `<tool_call>` text convention (convention), what a call does (actions), its schema (schemas) and
whether two actions agree (agreement)."""

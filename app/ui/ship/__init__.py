"""The Ship tab: GGUF export, deploy, serving and the agent tools it is set up in (controller, boxes, connect, panel)."""

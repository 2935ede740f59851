"""The Ship tab: GGUF export, deploy, serving, the agent tools it is set up in (controller, panel, boxes, connect)."""

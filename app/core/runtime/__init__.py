"""The runtime: one per data dir, Qt-free; it owns the background loops (capture, queue, server keeper, cycles)."""

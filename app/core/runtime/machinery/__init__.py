"""The runtime's machinery: the data dir's lock, the event bus and its types, the status channel."""

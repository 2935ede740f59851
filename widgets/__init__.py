"""Reusable Qt views (charts, tables, drop zones): given data, no DB, no sockets."""

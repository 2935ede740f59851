"""The ground floor every part stands on: the store and its schema, paths, settings, the protocol, errors, files."""

"""Data files a person brings: chat files checked line by line, their formats, files dropped on the window."""

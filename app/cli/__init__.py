"""The command line: one module per command group (`nightschool <group> …`), `main` parses and dispatches."""

"""PyInstaller entry point for the GUI bundle: runs the `nightschool` command."""
import sys

from app.cli.main import main

if __name__ == "__main__":
    sys.exit(main())

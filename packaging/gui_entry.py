"""PyInstaller entry point for the GUI bundle: runs the `nightschool` command."""
import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()  # a capture scan's prepare workers (spawned) start here as workers, not the app
    from app.cli.main import main

    sys.exit(main())

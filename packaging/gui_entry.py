"""PyInstaller entry point for the GUI bundle: runs the `nightschool` command."""
import multiprocessing
import sys

from app.cli.main import main

if __name__ == "__main__":
    multiprocessing.freeze_support()  # a spawned worker (capture/parallel) runs its task, not the app
    sys.exit(main())

"""``python -m analysis``; see ``analysis.cli`` (also the ``[project.scripts]`` entry point ``main``)."""

import sys

from analysis.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())

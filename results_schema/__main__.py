"""``python -m results_schema``; see ``results_schema.cli`` (also the ``[project.scripts]`` entry point ``main``)."""

import sys

from results_schema.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())

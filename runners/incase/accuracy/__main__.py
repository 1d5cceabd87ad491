"""``python -m runners.incase.accuracy`` (see :mod:`runners.incase.accuracy.cli`)."""

from runners.incase.accuracy.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m runners.accuracy`` (see :mod:`runners.accuracy.cli`)."""

from runners.accuracy.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

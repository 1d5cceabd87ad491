"""``python -m results_schema``; see ``results_schema.cli``."""

import sys

from results_schema.cli import main

sys.exit(main())

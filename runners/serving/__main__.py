"""``python -m runners.serving --case FILE --run-dir DIR`` (see ``runners.serving.driver``)."""

import sys

from runners.serving.driver import main

sys.exit(main())

"""``python -m runners.incase.serving --case FILE --run-dir DIR`` (see ``runners.incase.serving.driver``)."""

import sys

from runners.incase.serving.driver import main

sys.exit(main())

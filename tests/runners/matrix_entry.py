"""``python -m runners.matrix`` for the runner subprocesses the tests start, with the session's shared torch probe.

``python -m tests.runners.matrix_entry ARGS`` (:data:`tests.runners.helpers.RUNNER`) is ``runners.matrix.main``
(the same arguments, compose, signal handlers, run and exit codes; the recorded command and Hydra's config source,
``pkg://conf``, are those of an entry that is not ``__main__``, as the installed ``offload-matrix`` script) given a
``runners.orchestration.host_measures.HostMeasures`` whose torch probe is ``tests.shared_probe.session_probe``:
the probe's dict is shared with the pytest run that started it (its store and temporary directory come in the
environment). A subprocess runner otherwise probes for itself (1.2-1.3 CPU-s on the 2-core test host). The copy
bench is the real one. Outside a pytest session (the variables unset) it is ``runners.matrix.main()`` unchanged.

The real entry ``python -m runners.matrix`` stays under test where its start is the claim: the end-to-end tests
(``tests/e2e/``), the exit-code, strict-config and number-range CLI tests, the tier guard.
"""

from __future__ import annotations

import sys

from runners import matrix
from runners.identity import numerics
from runners.orchestration.host_measures import HostMeasures
from tests.shared_probe import session_probe


def main() -> int:
    probe = session_probe(numerics.probe_torch)
    return matrix.main(None if probe is None else HostMeasures(probe_torch=probe))


if __name__ == "__main__":
    sys.exit(main())

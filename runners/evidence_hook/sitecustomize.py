"""Evidence hook: loaded by every interpreter started with ``runners/evidence_hook`` on
``PYTHONPATH``. Inert unless ``OFFLOAD_EVIDENCE_PATH`` is set; then it only observes the
vLLM offloader (see ``offload_evidence_hook``) and never changes behaviour.
"""

import os

if os.environ.get("OFFLOAD_EVIDENCE_PATH"):
    import offload_evidence_hook

    offload_evidence_hook.install()

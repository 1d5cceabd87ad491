"""The part of an environment written to a run directory: what affects a run, secrets removed.

What is modelled: ``recordable_env`` (manifest environment, case log header). What is deliberately
not modelled: the manifest itself (``runners.identity.manifest.build_manifest``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from results_schema.records.manifest import REDACTED, is_secret_name, looks_like_credential

RECORDED_ENV_PREFIXES = ("VLLM_", "OMP_", "CUDA_", "ASCEND_", "HCCL_", "PYTORCH_", "TORCH_", "NCCL_", "OFFLOAD_",
                         "MKL_", "KMP_")
"""Environment variables with these prefixes affect a run (vLLM, OpenMP, CUDA/CANN/HCCL/NCCL, PyTorch,
this project's ``OFFLOAD_*``, MKL/KMP threading) and are recorded."""
RECORDED_ENV_NAMES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "PATH", "LD_LIBRARY_PATH", "LD_PRELOAD",
                      "PYTHONPATH", "PYTHONHASHSEED",
                      "PYTHONUNBUFFERED", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "DO_NOT_TRACK")
"""Single variables recorded besides the prefixes."""


def recordable_env(env: Mapping[str, str], declared: Iterable[str] = ()) -> dict[str, str]:
    """The part of ``env`` written to a run directory (manifest, case log header).

    Only what affects a run is kept: names with a ``RECORDED_ENV_PREFIXES`` prefix, the
    ``RECORDED_ENV_NAMES``, and ``declared`` (the runtime's ``env`` keys). A kept name
    that looks secret (``is_secret_name``: TOKEN, KEY, SECRET, ...) is dropped; a kept
    value that looks like a credential (``looks_like_credential``: ``ghp_``, ``hf_``,
    ``sk-``, ``AKIA``, JWT, URL with ``user:password@``) is replaced by ``REDACTED``.

    Returns:
        ``{name: value}`` sorted by name.
    """
    allowed = set(RECORDED_ENV_NAMES) | {str(d) for d in declared}
    out = {}
    for k, v in sorted(env.items()):
        if not (k.startswith(RECORDED_ENV_PREFIXES) or k in allowed) or is_secret_name(k):
            continue
        out[k] = REDACTED if looks_like_credential(str(v)) else str(v)
    return out

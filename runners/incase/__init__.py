"""What runs inside a case process: the code whose hash is the recorded case code.

Everything here imports only ``offload``, ``results_schema`` and this package (an import-linter
contract in ``pyproject.toml``), so ``runners.identity.case_code.case_code_sha256`` (over the project files a
case process imports from here and from ``offload.plugin``) covers exactly the code a case ran.

Modules: ``bench_one`` (``python -m runners.incase.bench_one``: one throughput case), ``accuracy``
(``python -m runners.incase.accuracy``: one accuracy case), ``serving`` (``python -m
runners.incase.serving``: one serving case), ``evidence_hook`` (loaded into vLLM's processes via
``sitecustomize``), ``case_input`` (the ``case.json`` read), ``engine_path`` (the engine's verdict on
the offload setting), ``prompts``, ``memory_sampler``, ``device_memory``, ``device_index``,
``process_group`` (a command in its own process group, also used by the runner),
``case_processes`` (finding and ending case processes), ``recorded_env`` (the environment
written to logs and manifests).
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository root (the directory holding ``runners/``), defined once here, where a case process can import it
(``runners.paths`` re-exports it for the orchestrator)."""

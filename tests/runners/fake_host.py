"""Build a fake Ascend / CUDA host for the real-host rehearsal (no device, no real vLLM engine).

What is faked, and only that: the device tools (``npu-smi``, ``nvidia-smi`` shell scripts
on ``PATH``), the vendor stacks (virtual environments created with ``python -m venv``
holding fake ``vllm`` / ``vllm-ascend`` / ``torch-npu`` distributions with real
``dist-info`` metadata and ``RECORD``), the CANN toolkit / driver version files and the
v0.18.0 source checkout (a real git repository). Each fake environment reaches this
project's dependencies (pydantic, ...) through a ``.pth`` line naming the test
interpreter's site-packages, as a real vendor environment has them installed; the
project itself is *not* installed there: it comes through the runner's ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

NPU_SMI = """#!/bin/sh
# fake npu-smi: health OK, one Ascend 910B3 chip
case "$*" in
  "info -t health"*) echo "Health Status : OK"; exit 0 ;;
  "info -m"*) printf '        NPU ID   Chip ID   Chip Logic ID   Chip Name\\n        0        0         0               Ascend 910B3\\n'; exit 0 ;;
  *) echo "fake npu-smi $*"; exit 0 ;;
esac
"""

NVIDIA_SMI = """#!/bin/sh
# fake nvidia-smi: one H200
case "$*" in
  *--query-gpu=index,uuid,name*) echo "0, GPU-00000000-fake-0000-0000-000000000000, NVIDIA H200"; exit 0 ;;
  *) echo "fake nvidia-smi $*"; exit 0 ;;
esac
"""


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _fake_dist(site: Path, dist: str, version: str, package: str) -> None:
    """A distribution with METADATA, RECORD and one module (a tree hash has something to hash)."""
    pkg = site / package
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}  # fake {dist} for the rehearsal\n")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{package}/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


def make_env(root: Path, dists: dict[str, tuple[str, str]]) -> Path:
    """A virtual environment with fake distributions ``{dist: (version, package)}``; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    py = root / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for dist, (version, package) in dists.items():
        _fake_dist(site, dist, version, package)
    return py


@dataclass
class FakeHost:
    root: Path
    bin: Path
    env: dict[str, str]


def ascend_host(root: Path) -> tuple[FakeHost, dict[str, Path]]:
    """Fake Ascend host: npu-smi, CANN files, a v0.23 env, a v0.18 env and its source checkout.

    Returns:
        ``(host, paths)`` with paths ``latest``, ``v018`` (interpreters), ``ascend`` (stands for
        /usr/local/Ascend) and ``src`` (stands for /opt/vllm-ascend-v0.18.0).
    """
    bin_dir = root / "bin"
    _script(bin_dir / "npu-smi", NPU_SMI)
    ascend = root / "Ascend"
    (ascend / "ascend-toolkit" / "latest").mkdir(parents=True)
    (ascend / "ascend-toolkit" / "latest" / "version.cfg").write_text("runtime_running_version=[8.1.RC1:8.1.RC1]\n")
    (ascend / "driver").mkdir(parents=True)
    (ascend / "driver" / "version.info").write_text("Version=24.1.rc3\n")
    src = root / "vllm-ascend-v0.18.0"
    (src / "vllm_ascend").mkdir(parents=True)
    (src / "vllm_ascend" / "__init__.py").write_text("# v0.18.0 source checkout (fake)\n")
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "v0.18.0"], check=True)
    common = {"vllm": ("0.11.0", "vllm_fake_marker"), "torch-npu": ("2.7.1", "torch_npu")}
    latest = make_env(root / "venv-latest", {**common, "vllm-ascend": ("0.23.1", "vllm_ascend")})
    v018 = make_env(root / "venv-v018", {"vllm": ("0.9.1", "vllm_fake_marker"), "torch-npu": ("2.5.1", "torch_npu"),
                                         "vllm-ascend": ("0.18.0", "vllm_ascend")})
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("ASCEND_RT_VISIBLE_DEVICES", None)
    return FakeHost(root=root, bin=bin_dir, env=env), {"latest": latest, "v018": v018, "ascend": ascend, "src": src}


def cuda_host(root: Path) -> tuple[FakeHost, dict[str, Path]]:
    """Fake CUDA host: nvidia-smi and an environment with a fake ``vllm`` 0.11.0."""
    bin_dir = root / "bin"
    _script(bin_dir / "nvidia-smi", NVIDIA_SMI)
    py = make_env(root / "venv-cuda", {"vllm": ("0.11.0", "vllm_fake_marker")})
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return FakeHost(root=root, bin=bin_dir, env=env), {"cuda": py}

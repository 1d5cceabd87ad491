"""Compile caches are per implementation.

vLLM's compile-cache key covers its config (the offload config included) and some
environment variables, not ``OFFLOAD_IMPL``: two cases with the same (G, N) but different
implementations would otherwise share ``<root>/torch_compile_cache/<hash>`` and the second
engine could load a graph traced through the first one's hooks. Claim: the case
environments of the matrix runner and of ``offload_tools.gpu_compare`` give each implementation
its own ``VLLM_CACHE_ROOT``, disjoint (neither inside the other), and vLLM resolves its
cache root from exactly that variable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from results_schema.records.base import Device
from conf.schema_stack import RuntimeConfig
from offload_tools.gpu_compare import engine_cache_root
from runners.launching.case_command import MODEL_INFO_DIR, case_env, publish_model_infos, share_model_info_cache
from runners.paths import CasePaths

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path, impl: str) -> dict[str, str]:
    sc = SimpleNamespace(case=SimpleNamespace(implementation=impl, runtime=RuntimeConfig(name="cpu", device=Device.cpu),
                                              fault=None, step_delay_ms=0.0))
    return case_env(sc, run_dir=tmp_path, paths=CasePaths.of(tmp_path, "p", f"{impl}-g4n1-r0"), base_env={})


def _disjoint(a: str, b: str) -> bool:
    pa, pb = Path(a), Path(b)
    return pa != pb and pa not in pb.parents and pb not in pa.parents


def test_matrix_case_env_gives_each_implementation_its_own_vllm_cache_root(tmp_path):
    roots = {impl: _env(tmp_path, impl)["VLLM_CACHE_ROOT"] for impl in ("baseline", "current", "official", "sync")}
    assert all(Path(r).is_relative_to(tmp_path / "cache") for r in roots.values())
    names = sorted(roots)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert _disjoint(roots[a], roots[b]), (a, b, roots)
    assert _env(tmp_path, "current")["VLLM_CACHE_ROOT"] == roots["current"]  # stable across cases


def test_gpu_compare_engines_get_disjoint_cache_roots(tmp_path):
    a, b = engine_cache_root(str(tmp_path), "current"), engine_cache_root(str(tmp_path), "official")
    assert _disjoint(a, b)


@pytest.mark.heavy  # a vLLM import in a child process (4 s CPU)
def test_vllm_reads_its_cache_root_from_the_variable_the_runner_sets(tmp_path):
    code = ("import json, os, vllm.envs as e; out = {}\n"
            "for impl in ('current', 'official'):\n"
            f"    os.environ['VLLM_CACHE_ROOT'] = os.path.join({str(tmp_path)!r}, 'cache', 'vllm', impl)\n"
            "    out[impl] = e.VLLM_CACHE_ROOT\n"
            "print('ROOTS ' + json.dumps(out))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    roots = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("ROOTS "))[6:])
    assert roots == {impl: _env(tmp_path, impl)["VLLM_CACHE_ROOT"] for impl in ("current", "official")}


@pytest.mark.heavy  # vLLM imports in child processes (4 s CPU)
def test_in_process_engines_see_their_own_root_even_after_vllm_cached_its_environment(tmp_path):
    """vLLM's in-process engine core freezes ``vllm.envs`` after start-up (enable_envs_cache)."""
    code = ("import json, vllm.envs as e\n"
            "from offload_tools.gpu_compare import apply_engine_cache_root\n"
            f"a = apply_engine_cache_root({str(tmp_path)!r}, 'current')\n"
            "e.enable_envs_cache()  # what EngineCore.__init__ does\n"
            f"b = apply_engine_cache_root({str(tmp_path)!r}, 'official')\n"
            "e.enable_envs_cache()\n"
            "print('ROOTS ' + json.dumps([a, b, e.VLLM_CACHE_ROOT]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    a, b, last = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("ROOTS "))[6:])
    assert a == engine_cache_root(str(tmp_path), "current")
    assert b == last == engine_cache_root(str(tmp_path), "official")


def test_the_implementations_of_a_run_share_only_the_model_info_cache(tmp_path):
    """``share_model_info_cache``: each implementation's ``modelinfos`` is a link to one directory of the run;
    a second call changes nothing; the compile-cache roots stay disjoint (the first test)."""
    shared = {impl: share_model_info_cache(tmp_path, impl) for impl in ("baseline", "current", "official")}
    assert set(shared.values()) == {tmp_path / "cache" / "vllm-modelinfos"} and shared["current"].is_dir()
    for impl in shared:
        link = Path(_env(tmp_path, impl)["VLLM_CACHE_ROOT"]) / MODEL_INFO_DIR
        assert link.is_symlink() and link.resolve() == shared[impl].resolve()
    assert share_model_info_cache(tmp_path, "current") == shared["current"]  # idempotent
    (tmp_path / "cache" / "vllm" / "sync" / MODEL_INFO_DIR).mkdir(parents=True)  # a directory there is kept
    share_model_info_cache(tmp_path, "sync")
    assert not (tmp_path / "cache" / "vllm" / "sync" / MODEL_INFO_DIR).is_symlink()


def test_a_new_run_starts_from_the_host_model_infos_and_hands_new_ones_back(tmp_path):
    """``host_cache``: a run's shared directory, when created, holds the host's ``*.json`` answers (an existing
    one is not refilled); ``publish_model_infos`` copies the run's new or changed answers back, nothing else."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "a.json").write_text('{"hash": "1"}')
    (host / "notes.txt").write_text("not an answer")
    shared = share_model_info_cache(tmp_path / "run1", "current", host)
    assert sorted(p.name for p in shared.iterdir()) == ["a.json"] and (shared / "a.json").read_text() == '{"hash": "1"}'
    (host / "b.json").write_text('{"hash": "2"}')
    assert share_model_info_cache(tmp_path / "run1", "official", host) == shared  # created once, seeded once
    assert sorted(p.name for p in shared.iterdir()) == ["a.json"]
    assert publish_model_infos(tmp_path / "run1", host) == []  # the host holds the same bytes
    (shared / "a.json").write_text('{"hash": "3"}')  # vLLM re-inspected (a stale answer) and saved a new one
    (shared / "c.json").write_text('{"hash": "4"}')
    assert publish_model_infos(tmp_path / "run1", host) == ["a.json", "c.json"]
    assert {p.name: p.read_text() for p in host.iterdir()} == {
        "a.json": '{"hash": "3"}', "b.json": '{"hash": "2"}', "c.json": '{"hash": "4"}', "notes.txt": "not an answer"}
    assert publish_model_infos(tmp_path / "no-run", host) == []  # a run without the directory copies nothing
    assert share_model_info_cache(tmp_path / "run2", "current", tmp_path / "missing").is_dir()  # no host cache yet


@pytest.mark.heavy(seconds=16)  # vLLM's Qwen2 model class imported in a child process (about 10 s CPU)
def test_model_info_saved_under_one_implementation_is_loaded_under_another(tmp_path):
    """vLLM's own cache calls, with the runner's roots: the model info saved while ``VLLM_CACHE_ROOT`` is the
    first implementation's is loaded while it is the second's (so that engine starts no inspection
    interpreter); under a root without the link vLLM finds nothing."""
    for impl in ("current", "official"):
        share_model_info_cache(tmp_path, impl)
    code = ("import json, os, pathlib\n"
            "import vllm.model_executor.models.registry as reg\n"
            "m = reg._LazyRegisteredModel('vllm.model_executor.models.qwen2', 'Qwen2ForCausalLM')\n"
            "h = m._get_modelinfo_module_hash(pathlib.Path(reg.__file__).parent / 'qwen2.py')\n"
            "def use(impl):\n"
            f"    os.environ['VLLM_CACHE_ROOT'] = os.path.join({str(tmp_path)!r}, 'cache', 'vllm', impl)\n"
            "use('current'); m._save_modelinfo_to_cache(reg._ModelInfo.from_model_cls(m.load_model_cls()), h)\n"
            "use('official'); a = m._load_modelinfo_from_cache(h)\n"
            "use('sync'); b = m._load_modelinfo_from_cache(h)\n"
            "print('LOADED ' + json.dumps([a.architecture if a else None, b is None]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("LOADED "))[7:])
    assert loaded == ["Qwen2ForCausalLM", True]
    assert [p.name for p in (tmp_path / "cache" / "vllm-modelinfos").iterdir()] == [
        "vllm-model_executor-models-qwen2-Qwen2ForCausalLM.json"]

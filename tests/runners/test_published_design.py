"""The published designs (qwen7b, qwen1_5b and _cuda twins) measure what the published work measured.

Each test pins one published behaviour through the real code path: config composition ->
plan -> the case.json the runner writes -> bench_one's reader -> the ``vllm.LLM`` kwargs;
the case environment; the health command and verdict; the schedule order and limits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.incase.bench_one import _specs, engine_kwargs, load_case
from runners.identity.health import health_argv, health_verdict
from runners.incase.device_index import device_placeholders, parse_npu_chips
from runners.kinds.registry import case_argv
from runners.launching.case_command import case_env
from runners.paths import CasePaths
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg

PUBLISHED = ("qwen7b", "qwen1_5b", "qwen7b_cuda", "qwen1_5b_cuda")


def _items(experiment: str, *overrides: str):
    return plan(compose_cfg(f"+experiment={experiment}", "model.path=/models/q", *overrides))


def _kwargs(sc, tmp_path: Path) -> dict:
    argv = case_argv(sc, model_dir=Path("/models/q"), paths=CasePaths.of(tmp_path, sc.case.phase, sc.stem),
                     bench_command=None, python="python")
    assert argv[3:-1] == ("--case",)
    case = load_case(argv[-1])
    offload, workload = _specs(case)
    return engine_kwargs(case.model, offload, workload), workload


@pytest.mark.parametrize("experiment", PUBLISHED)
@pytest.mark.heavy  # measured 1.2 s over 4 cases in the fast tier (its budget is 2 minutes)
def test_published_engine_kwargs(experiment, tmp_path):
    items = _items(experiment)
    base = next(sc for sc in items if sc.case.implementation == "baseline")
    kw, a = _kwargs(base, tmp_path)
    assert kw == dict(model="/models/q", dtype="float16", max_model_len=512, seed=0, enforce_eager=True,
                      gpu_memory_utilization=0.5, trust_remote_code=True, max_num_seqs=8,
                      max_num_batched_tokens=512 * 8)  # no enable_prefix_caching: vLLM's default
    assert a.prompt_mode == "seed_text" and not a.prompts_vary_per_round and a.ignore_eos is False
    assert a.temperature == 0.0 and a.seed == 0 and a.num_prompts == 8 and a.input_len == 128 and a.max_tokens == 64


@pytest.mark.parametrize("experiment", PUBLISHED)
@pytest.mark.heavy  # measured 1.1 s over 4 cases in the fast tier (its budget is 2 minutes)
def test_every_published_offload_case_passes_prefetch_explicitly(experiment, tmp_path):
    items = _items(experiment)
    offload = [sc for sc in items if sc.case.offload_requested]
    assert offload and {sc.case.backend for sc in offload} == {"prefetch"}
    kw, _ = _kwargs(offload[0], tmp_path)
    assert kw["offload_backend"] == "prefetch" and kw["offload_group_size"] == offload[0].case.group_size
    assert "_prefetch" not in offload[0].case.label  # labels stay those of the published tables
    assert all(sc.case.backend == "auto" for sc in items if sc.case.implementation == "baseline")


def test_project_workload_stays_the_cpu_default(tmp_path):
    items = plan(compose_cfg())
    kw, a = _kwargs(items[0], tmp_path)
    assert kw["dtype"] == "bfloat16" and kw["enable_prefix_caching"] is False
    assert "max_num_seqs" not in kw and "max_num_batched_tokens" not in kw and "trust_remote_code" not in kw
    assert a.prompt_mode == "random_ids" and a.ignore_eos is True and a.prompts_vary_per_round
    assert {sc.case.backend for sc in items} == {"auto"}


def test_workload_seed_keeps_the_project_workload_as_an_option(tmp_path):
    items = _items("qwen7b", "workload=seed")
    kw, a = _kwargs(items[0], tmp_path)
    assert kw["dtype"] == "bfloat16" and a.prompt_mode == "random_ids" and a.ignore_eos is True


def test_seed_text_needs_the_same_prompts_every_round():
    from results_schema.records.case import CaseSpec, RequestedOffload
    from results_schema.records.models import WorkloadSpec

    w = WorkloadSpec(num_prompts=1, input_len=4, max_tokens=4, max_model_len=16, seed=0, dtype="bfloat16",
                     enforce_eager=True, gpu_memory_utilization=0.5, warmup_rounds=1, measured_rounds=3,
                     enable_prefix_caching=None, prompts_vary_per_round=True, prompt_mode="seed_text")
    case = CaseSpec(kind="bench", phase="p", label="baseline", implementation="baseline", repeat=0, runtime="cpu",
                    model="m", offload=RequestedOffload(offload_group_size=0, offload_num_in_group=0), workload=w,
                    record="r.json")
    with pytest.raises(ValueError, match="same prompts in every round"):
        _specs(case)


ASCEND_ENV = {"TASK_QUEUE_ENABLE": "1", "OMP_NUM_THREADS": "1", "PYTHONNOUSERSITE": "1",
              "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "VLLM_TARGET_DEVICE": "npu"}


@pytest.mark.parametrize("experiment", ["qwen7b", "qwen1_5b"])
@pytest.mark.heavy  # measured 0.6 s over 2 cases in the fast tier (its budget is 2 minutes)
def test_ascend_case_env_keeps_cann_pythonpath_after_ours(experiment, tmp_path):
    from runners.paths import EVIDENCE_HOOK_DIR, REPO_ROOT

    cann = "/usr/local/Ascend/ascend-toolkit/latest/python/site-packages:/usr/local/Ascend/tbe"
    for sc in _items(experiment):
        env = case_env(sc, run_dir=tmp_path, paths=CasePaths.of(tmp_path, sc.case.phase, sc.stem),
                       base_env={"PYTHONPATH": cann, "OMP_NUM_THREADS": "8"})
        assert {k: env[k] for k in ASCEND_ENV} == ASCEND_ENV
        assert env["PYTHONPATH"] == f"{EVIDENCE_HOOK_DIR}:{REPO_ROOT}:{cann}"


def test_cpu_case_env_still_replaces_pythonpath(tmp_path):
    from runners.paths import EVIDENCE_HOOK_DIR, REPO_ROOT

    sc = plan(compose_cfg())[0]
    env = case_env(sc, run_dir=tmp_path, paths=CasePaths.of(tmp_path, sc.case.phase, sc.stem),
                   base_env={"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"] == f"{EVIDENCE_HOOK_DIR}:{REPO_ROOT}" and "TASK_QUEUE_ENABLE" not in env


NPU_SMI_M = """\
        NPU ID                         Chip ID                        Chip Logic ID                  Chip Name
        4                              0                              0                              Ascend 910B3
        4                              1                              -                              Mcu
        6                              0                              1                              Ascend 910B3
"""


@pytest.mark.parametrize("experiment", ["qwen7b", "qwen1_5b"])
@pytest.mark.heavy  # measured 0.7 s over 2 cases in the fast tier (its budget is 2 minutes)
def test_published_health_command_names_the_physical_device_and_chip(experiment):
    rt = _items(experiment)[0].case.runtime
    values = device_placeholders("npu", env={"ASCEND_RT_VISIBLE_DEVICES": "1"}, npu_smi_output=NPU_SMI_M)
    assert health_argv(rt.health_command, values) == ["npu-smi", "info", "-t", "health", "-i", "6", "-c", "0"]
    expect = rt.health_expect
    assert health_verdict(0, "        Health Status                  : OK\n", expect) is None
    assert "does not match" in health_verdict(0, "        Health Status                  : Warning\n", expect)
    assert health_verdict(3, "Health Status : OK", expect) == "exited 3"


def test_npu_chip_table_and_overrides():
    assert parse_npu_chips(NPU_SMI_M) == {0: (4, 0), 1: (6, 0)}
    assert device_placeholders("npu", env={}, npu_smi_output=NPU_SMI_M) == {"physical_index": "4", "chip": "0"}
    assert device_placeholders("npu", env={"NPU_INDEX": "2", "NPU_CHIP": "1"}) == {"physical_index": "2", "chip": "1"}
    with pytest.raises(ValueError, match="logical NPU 5"):
        device_placeholders("npu", env={"ASCEND_RT_VISIBLE_DEVICES": "5"}, npu_smi_output=NPU_SMI_M)


@pytest.mark.parametrize("experiment", PUBLISHED)
@pytest.mark.heavy  # measured 1.3 s over 4 cases in the fast tier (its budget is 2 minutes)
def test_published_process_limits(experiment):
    for sc in _items(experiment):
        assert (sc.case.cooldown_s, sc.case.timeout_s, sc.case.kill_grace_s) == (3.0, 1800.0, 15.0)


@pytest.mark.parametrize("experiment", ["qwen1_5b", "qwen1_5b_cuda"])
@pytest.mark.heavy  # measured 0.6 s over 2 cases in the fast tier (its budget is 2 minutes)
def test_1_5b_runs_focus_labels_first_then_capacity_labels(experiment):
    items = [sc for sc in _items(experiment) if sc.case.phase == "parameter_optimization"]
    focus = {"baseline", "current_g28_n1", "current_g14_n1", "current_g28_n2", "current_g8_n1"}
    assert [sc.case.label in focus for sc in items] == [True] * 25 + [False] * 18
    assert all(sc.case.repeats == 5 for sc in items[:25]) and all(sc.case.repeats == 3 for sc in items[25:])


def test_1_5b_runs_on_the_native_v018_runtime():
    assert {sc.case.runtime_name for sc in _items("qwen1_5b")} == {"ascend_native_v018"}


def test_workload_spec_serializes_published_options_only_when_set():
    import json

    from results_schema.codec.io import dumps_model
    from results_schema.records.models import WorkloadSpec

    base = dict(num_prompts=8, input_len=128, max_tokens=64, max_model_len=512, seed=0, dtype="bfloat16",
                enforce_eager=True, gpu_memory_utilization=0.5, warmup_rounds=1, measured_rounds=3,
                enable_prefix_caching=False, prompts_vary_per_round=True)
    project = json.loads(dumps_model(WorkloadSpec(**base)))
    assert "prompt_mode" not in project and "ignore_eos" not in project and "max_num_seqs" not in project
    pub = WorkloadSpec(**{**base, "enable_prefix_caching": None, "prompts_vary_per_round": False,
                          "prompt_mode": "seed_text", "ignore_eos": False, "trust_remote_code": True,
                          "max_num_seqs": 8, "max_num_batched_tokens_factor": 8})
    text = dumps_model(pub)  # proves the round trip
    assert WorkloadSpec.model_validate_json(text) == pub and json.loads(text)["ignore_eos"] is False


@pytest.mark.parametrize("experiment", ("qwen7b", "qwen1_5b"))
@pytest.mark.heavy  # measured 1.4 s over 2 cases in the fast tier (its budget is 2 minutes)
def test_published_accuracy_phase_needs_the_full_splits(experiment):
    """The published verification ran the full GSM8K / GPQA Diamond splits: the published designs default to
    them and stop before any process without them (exit 2, naming the manifest); fixtures are a named choice."""
    from runners.orchestration.accuracy_phase import check_accuracy_inputs
    from runners.errors import EXIT_CONFIG, RunnerError

    items = [sc for sc in _items(experiment) if sc.case.kind == "accuracy"]
    assert {sc.case.accuracy_manifest for sc in items} == {"eval_datasets/full/manifest.json"}
    from runners.paths import accuracy_manifest_path

    if accuracy_manifest_path("eval_datasets/full/manifest.json").exists():  # pragma: no cover - a checkout with the full splits materialized
        pytest.skip("eval_datasets/full/manifest.json exists here; the missing-data path is not reachable")
    with pytest.raises(RunnerError) as err:
        check_accuracy_inputs(items)
    assert err.value.exit_code == EXIT_CONFIG and "eval_datasets/full/manifest.json" in str(err.value)
    assert "runners.incase.accuracy materialize" in str(err.value)
    rehearsal = _items(experiment, "phases.accuracy.accuracy_manifest=eval_datasets/fixtures/manifest.json")
    phases = check_accuracy_inputs([sc for sc in rehearsal if sc.case.kind == "accuracy"])
    assert [p.formal for p in phases] == [False]  # fixtures: limited mode, and the verifier says so


@pytest.mark.parametrize("ignore_eos", [False, True])
@pytest.mark.heavy  # measured 3.1 s over 2 cases in the fast tier (its budget is 2 minutes)
def test_round_sends_the_workloads_ignore_eos_and_the_same_text_prompts(ignore_eos, tmp_path):
    """What ``bench_one`` hands ``LLM.generate`` each round (a recording LLM at the engine boundary): the
    workload's ``ignore_eos`` (published: false), greedy, and the same seed-text prompts in every round."""
    from types import SimpleNamespace

    from runners.incase.bench_one import _round_fn

    base = next(sc for sc in _items("qwen7b") if sc.case.implementation == "baseline")
    _, w = _kwargs(base, tmp_path)
    w = w.model_copy(update={"ignore_eos": ignore_eos})
    tokenizer = SimpleNamespace(encode=lambda text, add_special_tokens=False: [ord(ch) for ch in text],
                                decode=lambda ids, **_: "".join(chr(i) for i in ids))
    calls = []

    class RecordingLLM:
        def get_tokenizer(self):
            return tokenizer

        def generate(self, prompts, sp, use_tqdm=False):
            calls.append((list(prompts), sp))
            out = SimpleNamespace(token_ids=[1, 2])
            return [SimpleNamespace(outputs=[out], prompt_token_ids=[0] * w.input_len) for _ in prompts]

    one_round = _round_fn(RecordingLLM(), w)
    one_round(0), one_round(1)
    (p0, sp0), (p1, sp1) = calls
    assert sp0.ignore_eos is ignore_eos and sp0.temperature == 0.0 and sp0.max_tokens == 64 and sp0.seed == 0
    assert p0 == p1 and len(p0) == 8 and all(isinstance(p, str) and len(p) == 128 for p in p0)

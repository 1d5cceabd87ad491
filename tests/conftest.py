"""Shared fixtures and the test tiers. Markers are registered in pyproject.toml (``--strict-markers``).

Tiers (README "Tests"): ``make test`` runs every test but ``full_grid``/``gpu``/``npu`` (opt-in:
they run only when ``-m`` names them);
``make test-fast`` also leaves out ``slow``, ``engine`` (a vLLM engine, Ray cluster or browser
start) and ``heavy`` tests (no engine, several CPU seconds each). ``tests/tier_guard.py`` fails any
test without ``engine``/``slow`` that starts an engine anyway, so no engine hides in the fast tier.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.shared_runs import share_host_measurements  # noqa: F401  (autouse, session)
from tests.tier_guard import PLUGIN_NAME, TierGuard, install

REPO_ROOT = Path(__file__).resolve().parents[1]
MODEL_CACHE = REPO_ROOT / ".cache" / "models"


OPT_IN_MARKERS = ("full_grid", "gpu", "npu")
"""Markers whose tests run only when the ``-m`` expression names them (as pyproject's default does)."""


def pytest_configure(config: pytest.Config) -> None:
    install(config)


ENGINE_TESTS: dict[str, str] = {
    "tests/analysis/test_html_report.py::test_browser_renders_the_valid_report": "headless Chromium",
    "tests/analysis/test_html_report.py::test_browser_renders_the_invalid_report_verdict_first": "headless Chromium",
    "tests/analysis/test_html_report.py::test_browser_renders_the_real_tiny_run": "headless Chromium",
}
"""Tests (``file::name``, every parametrization) that start an engine but are not ``slow``: marked ``engine`` here.

Kept in one place (no edits to those test files); ``tests/tier_guard.py`` fails an engine start in a
test missing from this list, and a listed test that no longer exists is reported as a warning.
"""


_ACC = "tests/runners/test_accuracy_phase.py::"
_MATRIX = "a whole runner matrix in process with real case processes (tokenizer, scoring, analysis)"
HEAVY_TESTS: dict[str, str] = {
    "tests/accuracy/test_phase_protocol.py::test_phase_runs_under_the_default_and_under_another_registered_protocol":
        "two accuracy runs of the runner with analysis (32 s CPU)",
    _ACC + "test_accuracy_phase_records_cases_and_verifies_in_limited_mode": _MATRIX + " (27 s CPU)",
    _ACC + "test_output_difference_fails_the_run_with_the_accuracy_exit_code": _MATRIX + " (18 s CPU)",
    _ACC + "test_crashed_case_is_a_failure_line_and_the_verifier_names_the_missing_case": _MATRIX + " (16 s CPU)",
    _ACC + "test_resume_skips_completed_accuracy_cases": _MATRIX + " (15 s CPU)",
    _ACC + "test_accuracy_limit_is_passed_and_verified_as_limited": _MATRIX + " (10 s CPU)",
    _ACC + "test_config_chooses_the_manifest": _MATRIX + " (10 s CPU)",
    _ACC + "test_resume_refuses_a_changed_dataset_manifest": _MATRIX + " (10 s CPU)",
    _ACC + "test_no_analysis_means_no_verifier": _MATRIX + " (9 s CPU)",
    _ACC + "test_phase_backend_reaches_every_case_and_is_verified_against_the_plan": _MATRIX + " (15 s CPU)",
    "tests/offload/test_gpu_check_torch.py::test_cpu_run_prints_summary_and_outputs_are_bitwise_equal_in_eager_and_compiled_modes":
        "torch.compile (Inductor) on CPU (6 s CPU)",
    "tests/offload/test_gpu_check_torch.py::test_bad_arguments_exit_2_with_a_message_and_no_traceback":
        "4 processes that import torch before checking arguments (5 s CPU each)",
    "tests/runners/test_exit_codes.py::test_gpu_check_without_cuda_prints_one_line_error": "imports torch (4 s CPU)",
    "tests/runners/test_faults.py::test_resume_after_interrupt_yields_the_same_records_as_an_uninterrupted_run":
        "two fake-bench matrices, one interrupted and resumed (10 s CPU)",
    "tests/runners/test_processes.py::test_sigkill_of_the_runner_mid_case_leaves_no_process_and_resume_completes":
        "a runner process killed and resumed (5 s CPU)",
    "tests/runners/test_serving.py::test_matrix_serving_phase_with_fake_server_writes_valid_records":
        "a serving matrix with the fake server and the benchmark client (13 s CPU)",
    "tests/runners/test_serving.py::test_server_token_count_drift_fails_the_case": "a serving matrix (14 s CPU)",
    "tests/runners/test_serving.py::test_server_leaving_a_child_behind_is_a_failure_record_and_nothing_survives":
        "a serving matrix (14 s CPU)",
    "tests/runners/test_serving.py::test_stop_tree_reports_a_child_left_behind_and_kills_it": "(4 s CPU)",
    "tests/runners/test_serving.py::test_clean_server_stops_on_sigterm_without_escalation": "(4 s CPU)",
    # runner runs with the fake bench / fake server: 2.5 s CPU or more each
    "tests/runners/test_serving.py::test_fake_server_killed_mid_sweep_is_server_died": "(13 s CPU)",
    "tests/runners/test_proof_verdict.py::test_invalid_run_exits_6_and_validate_and_report_exit_nonzero_naming_the_case": "(8 s CPU)",
    "tests/runners/test_processes.py::test_resume_completes_a_run_whose_runner_was_sigkilled": "(5 s CPU)",
    "tests/runners/test_run_lock.py::test_second_runner_is_refused_mid_case_then_a_killed_runner_is_taken_over":
        "two fake-bench runners with analysis, a refused resume, a SIGKILL and a resume (20 s CPU)",
    "tests/runners/test_resume_rules.py::test_resume_with_other_overrides_exits_2_and_a_complete_run_is_left_untouched":
        "a fake-bench run and four resumes, two as processes (6 s CPU)",
    "tests/runners/test_exit_codes.py::test_bad_paths_exit_2_in_one_line_before_any_process": "4 runner processes (4 s CPU)",
    "tests/runners/test_secrets.py::test_a_short_token_reaches_no_file_of_a_baseline_only_run_even_through_a_failure":
        "a fake-bench run (3 s CPU)",
    "tests/offload/test_selection.py::test_offload_package_imports_no_hydra_pandas_or_runners": "imports vLLM in a child (5 s CPU)",
    "tests/runners/test_proof_verdict.py::test_valid_fake_run_ends_with_a_valid_verdict_and_records_plain_kernels": "(4 s CPU)",
    "tests/runners/test_experiments_run.py::test_reproduction_run_sh_is_executable_and_uses_the_run_interpreter": "(4 s CPU)",
    "tests/runners/test_faults.py::test_disagreements_become_typed_failures": "(4 s CPU)",
    "tests/runners/test_overhead.py::test_overhead_is_runner_wall_minus_case_walls_per_case": "(3 s CPU)",
    "tests/runners/test_faults.py::test_sigkilled_case_is_a_failure_record_and_the_matrix_continues": "(3 s CPU)",
    "tests/runners/test_faults.py::test_expected_upstream_assertion_is_a_failure_record_and_the_rest_completes": "(3 s CPU)",
    "tests/evidence_hook/test_hook.py::test_upstream_prefetch_offloader_fails_on_cpu_with_its_assertion_and_publishes_nothing":
        "imports vLLM's offloaders (3 s CPU)",
    "tests/runners/test_faults.py::test_formal_run_stops_at_first_failure_keeping_completed_evidence": "(3 s CPU)",
    "tests/runners/test_processes.py::test_sigint_of_the_runner_still_cleans_up": "(3 s CPU)",
    "tests/analysis/test_notebook.py::test_pareto_notebook_executes_on_a_run_dir": "a Jupyter kernel (3 s CPU)",
    "tests/runners/test_faults.py::test_pinned_file_changed_during_a_phase_stops_before_the_next_phase": "(3 s CPU)",
    "tests/runners/test_faults.py::test_health_gate_failing_after_the_last_phase_exits_42_and_never_ends_valid":
        "a fake-bench matrix with analysis (4 s CPU)",
    "tests/runners/test_faults.py::test_resumed_case_whose_tokens_differ_from_an_earlier_baseline_is_never_ok":
        "a fake-bench matrix, then its resume with analysis (6 s CPU)",
    # waits on purpose (a case or server timeout, a process that must be reaped): 3 s or more of wall each
    "tests/runners/test_faults.py::test_case_sleeping_past_timeout_is_killed_with_its_children": "(6 s, 2 s CPU)",
    "tests/runners/test_processes.py::test_hiding_case_in_the_matrix_is_a_timeout_and_leaves_nothing": "(6 s, 2 s CPU)",
    "tests/runners/test_serving.py::test_server_that_never_becomes_healthy_is_a_fault_and_is_stopped": "(3 s)",
    "tests/runners/test_faults.py::test_child_that_leaves_the_process_group_is_still_reaped": "(3 s)",
    "tests/runners/test_experiments_run.py::test_stability_requires_output_in_every_round": "(2.5 s CPU)",
    "tests/runners/test_answering_model.py::test_torch_decoder_equals_transformers_qwen2_on_the_committed_weights":
        "imports transformers' Qwen2 (5 s CPU)",
    "tests/runners/test_answering_model.py::test_training_twice_from_scratch_gives_identical_weights":
        "three tiny trainings with torch (3 s CPU)",
    "tests/runners/test_compile_cache_per_implementation.py::test_vllm_reads_its_cache_root_from_the_variable_the_runner_sets":
        "a vLLM import in a child process (4 s CPU)",
    "tests/runners/test_compile_cache_per_implementation.py::test_in_process_engines_see_their_own_root_even_after_vllm_cached_its_environment":
        "vLLM imports in child processes (4 s CPU)",
}
"""Tests (``file::name``, or a whole ``file``) without an engine that take 2.5 s or more each: ``heavy``.

Measured on the 2-core machine on 2026-11-30 (user + system CPU seconds of the pytest process and
its reaped children per test, from ``resource.getrusage``; a test's wall time there was inflated
by the machine's load); ``make test-fast`` leaves them out to stay under 3 minutes, ``make test``
runs them.
"""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects on the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark :data:`ENGINE_TESTS` ``engine`` and :data:`HEAVY_TESTS` ``heavy``; deselect opt-in tests.

    Opt-in tests (:data:`OPT_IN_MARKERS`) not named by ``-m`` are deselected: ``-m 'not slow'``
    replaces pyproject's ``-m 'not full_grid and not gpu and not npu'``; without this step it would
    start the full offload grid over real vLLM (about 20 minutes).
    """
    _mark_listed(items, ENGINE_TESTS, pytest.mark.engine)
    _mark_listed(items, HEAVY_TESTS, pytest.mark.heavy)
    _deselect_opt_in(config, items)


def _mark_listed(items: list[pytest.Item], listed: dict[str, str], mark: pytest.MarkDecorator) -> None:
    """Add ``mark`` to items whose ``file::name`` or ``file`` is a key of ``listed``; warn about stale keys."""
    found = set()
    for item in items:
        name = item.nodeid.split("[", 1)[0]
        for key in (name, name.split("::", 1)[0]):
            if key in listed:
                item.add_marker(mark)
                found.add(key)
    files = {item.nodeid.split("::", 1)[0] for item in items}
    for key in sorted(set(listed) - found):
        if key.split("::", 1)[0] in files:
            warnings.warn(f"tests/conftest.py lists {key} for {mark.name!r}, which no longer exists", stacklevel=1)


def _deselect_opt_in(config: pytest.Config, items: list[pytest.Item]) -> None:
    expr = config.getoption("markexpr") or ""
    skipped = [m for m in OPT_IN_MARKERS if m not in expr]
    if not skipped:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if any(item.get_closest_marker(m) for m in skipped) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def tier_guard(request: pytest.FixtureRequest) -> TierGuard:
    """The session's fast-tier guard (its own tests read and clear its detections)."""
    guard = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    assert isinstance(guard, TierGuard)
    return guard


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The default 8-layer tiny Qwen2 model, built once into ``.cache/models`` and verified."""
    from runners.models.tiny_model import ensure_tiny_model

    return ensure_tiny_model(MODEL_CACHE)

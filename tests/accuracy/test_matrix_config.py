"""conf/matrix/accuracy.yaml composes under the project schema: baseline + current (4,1), (2,1) x gsm8k, gpqa."""

from __future__ import annotations

from hydra import compose, initialize_config_module


def test_accuracy_matrix_plans_baseline_and_two_offload_points_per_task() -> None:
    from conf.schema import register_configs
    from conf.typed import load_config
    from runners.planning.plan import plan

    register_configs()
    overrides = ["~matrix@phases.same_runtime", "+matrix@phases.accuracy=accuracy"]
    with initialize_config_module(config_module="conf", version_base="1.3"):
        cfg = load_config(compose("config", overrides=overrides), overrides)
    items = plan(cfg)
    tasks: dict[tuple[str, int, int], list[str]] = {}
    for sc in items:  # one process per case (all tasks) or per (case, task): both are fresh processes
        tasks.setdefault((sc.case.implementation, sc.case.group_size, sc.case.num_in_group), []).extend(
            sc.case.accuracy_tasks)
    assert {k: sorted(v) for k, v in tasks.items()} == {
        ("baseline", 0, 0): ["gpqa", "gpqa", "gsm8k", "gsm8k"],  # the baseline runs twice
        ("current", 4, 1): ["gpqa", "gsm8k"], ("current", 2, 1): ["gpqa", "gsm8k"]}
    assert {sc.case.kind for sc in items} == {"accuracy"}
    assert {(sc.case.label, sc.case.repeats) for sc in items} == {
        ("baseline", 2), ("current_g4_n1", 1), ("current_g2_n1", 1)}

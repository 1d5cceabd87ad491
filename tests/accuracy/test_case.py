"""One accuracy case with a fake engine: files, determinism, refusals."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from results_schema.records.accuracy import AccuracyResult
from results_schema.codec.io import read_json, write_json
from runners.incase.accuracy.case import CaseError, run_cases
from runners.incase.accuracy.cli import main, parse_offload
from runners.incase.accuracy.protocol import ChatTemplateMissing

from .conftest import FIXTURE_MANIFEST, FakeEngine, engine_settings, make_run, offload


def test_case_writes_result_and_case_independent_examples(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = make_run(tmp_path / "r", tiny_model_dir)
    cases = run / "cases"
    for task, n in (("gsm8k", 8), ("gpqa", 12)):
        base = read_json(cases / f"baseline.{task}.result.json", AccuracyResult)
        off = read_json(cases / f"current_g4_n1.{task}.result.json", AccuracyResult)
        assert base.num_examples == off.num_examples == n
        assert base.examples_sha256 == off.examples_sha256
        assert (cases / base.examples_path).read_bytes() == (cases / off.examples_path).read_bytes()
        assert hashlib.sha256((cases / base.examples_path).read_bytes()).hexdigest() == base.examples_sha256
        assert base.mode == "limited"  # fixture data is never formal
        rows = [json.loads(line) for line in (cases / base.examples_path).read_text().splitlines()]
        assert [r["index"] for r in rows] == list(range(n))
        assert base.unparsable == sum(r["unparsable"] for r in rows)
        assert all(len(r["prompt_sha256"]) == 64 for r in rows)
        # the published protocol's per-example and per-task fields
        source = [json.loads(line) for line in (FIXTURE_MANIFEST.parent / base.dataset.path).read_text().splitlines()]
        assert [r["row"] for r in rows] == source  # the data row as stored
        assert all({"gold", "output_text", "parsed", "output_tokens", "finish_reason", "correct"} <= set(r)
                   for r in rows)
        assert base.protocol_name == "qwen-chat-v1" and base.protocol_sha256 == base.protocol.sha256()
        assert base.parsed == n - base.unparsable
        assert base.finish_reasons == dict(Counter(r["finish_reason"] for r in rows))
        assert base.length_limited == sum(r["finish_reason"] == "length" for r in rows)
        assert (base.dataset.source, base.dataset.config, base.dataset.revision, base.dataset.split) == (
            "fixture", {"gsm8k": "main", "gpqa": "gpqa_diamond"}[task], "fixture-v1",
            {"gsm8k": "test", "gpqa": "train"}[task])
    gpqa = read_json(cases / "baseline.gpqa.result.json", AccuracyResult)
    assert gpqa.unparsable > 0  # the fake says "I think C" sometimes: counted wrong and separately


def test_case_refuses_to_overwrite(tmp_path: Path, tiny_model_dir: Path) -> None:
    make_run(tmp_path / "r", tiny_model_dir, datasets=("gsm8k",), cases=(("baseline", offload()),))
    with pytest.raises(CaseError, match="already exists; results are never overwritten"):
        make_run(tmp_path / "r", tiny_model_dir, datasets=("gsm8k",), cases=(("baseline", offload()),))


def test_env_implementation_must_agree(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFLOAD_IMPL", "sync")
    with pytest.raises(CaseError, match="OFFLOAD_IMPL='sync' in the environment disagrees with --implementation 'current'"):
        run_cases(model=str(tiny_model_dir), manifest=FIXTURE_MANIFEST, datasets=["gsm8k"], implementation="current",
                  offload=offload(4, 1), out_dir=tmp_path, engine_settings=engine_settings(),
                  engine_factory=FakeEngine)


def test_baseline_with_offload_is_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    with pytest.raises(CaseError, match="implementation baseline needs offload_group_size 0"):
        run_cases(model=str(tiny_model_dir), manifest=FIXTURE_MANIFEST, datasets=["gsm8k"],
                  implementation="baseline", offload=offload(4, 1), out_dir=tmp_path,
                  engine_settings=engine_settings(), engine_factory=FakeEngine)


def test_model_without_chat_template_fails_before_engine_start(tmp_path: Path, tiny_model_dir: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(cfg))
    (model / "chat_template.jinja").unlink(missing_ok=True)

    def no_engine(*a: object) -> None:
        raise AssertionError("engine must not start")

    with pytest.raises(ChatTemplateMissing, match="has no chat_template"):
        run_cases(model=str(model), manifest=FIXTURE_MANIFEST, datasets=["gsm8k"], implementation="baseline",
                  offload=offload(), out_dir=tmp_path / "out", engine_settings=engine_settings(),
                  engine_factory=no_engine)


def test_prompt_longer_than_context_fails_before_engine_start(tmp_path: Path, tiny_model_dir: Path) -> None:
    from runners.incase.accuracy.materialize import materialize

    src = tmp_path / "long.jsonl"
    src.write_text(json.dumps({"question": "How many? " * 2000, "answer": "#### 1"}) + "\n")
    materialize("gsm8k", tmp_path / "data", from_file=src, kind="fixture")
    with pytest.raises(CaseError, match=r"exceeds max_model_len \(4096\)"):
        run_cases(model=str(tiny_model_dir), manifest=tmp_path / "data" / "manifest.json", datasets=["gsm8k"],
                  implementation="baseline", offload=offload(), out_dir=tmp_path, engine_factory=FakeEngine)


def test_run_option_contradicting_the_protocol_is_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    with pytest.raises(CaseError, match=r"protocol qwen-chat-v1 fixes max_model_len=4096; the run asks for "
                                        r"max_model_len=520"):
        run_cases(model=str(tiny_model_dir), manifest=FIXTURE_MANIFEST, datasets=["gsm8k"],
                  implementation="baseline", offload=offload(), out_dir=tmp_path,
                  engine_settings=engine_settings(max_model_len=520), engine_factory=FakeEngine)
    assert not any(tmp_path.iterdir())


def test_engine_is_the_protocol_pins_plus_run_options() -> None:
    from results_schema.records.protocols import protocol_spec
    from runners.incase.accuracy.case import resolve_engine

    pins = protocol_spec("qwen-chat-v1", "gsm8k").engine
    got = resolve_engine(pins, engine_settings(max_num_seqs=8, max_model_len=4096), "qwen-chat-v1")
    assert got.vllm_kwargs() == {"enforce_eager": True, "max_model_len": 4096, "gpu_memory_utilization": 0.5,
                                 "max_num_seqs": 8}


def test_offload_case_with_empty_evidence_fails(tmp_path: Path, tiny_model_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from results_schema.records.models import RuntimeEvidence

    ev = tmp_path / "ev.json"
    write_json(ev, RuntimeEvidence(offloader_class="x.Noop", implementation="current", offload_group_size=4,
                                   offload_num_in_group=1, offload_prefetch_step=1, num_layers=8,
                                   selected_layers=(3, 7), wrapped_layers=(), wrapped_count=0, offloaded_bytes=0,
                                   static_buffer_bytes=0, released_bytes=0, post_init_called=True, pid=1,
                                   device="cpu"))
    monkeypatch.setenv("OFFLOAD_EVIDENCE_PATH", str(ev))
    with pytest.raises(CaseError, match="requested but evidence shows nothing offloaded"):
        run_cases(model=str(tiny_model_dir), manifest=FIXTURE_MANIFEST, datasets=["gsm8k"],
                  implementation="current", offload=offload(4, 1), out_dir=tmp_path / "o",
                  engine_settings=engine_settings(), engine_factory=FakeEngine)


def test_parse_offload() -> None:
    assert parse_offload("0").enabled is False
    o = parse_offload("4,1")
    assert (o.offload_group_size, o.offload_num_in_group, o.offload_prefetch_step) == (4, 1, 1)
    with pytest.raises(ValueError, match=r"offload_num_in_group \(3\) must be <= offload_group_size \(2\)"):
        parse_offload("2,3")
    with pytest.raises(ValueError, match="expected G,N or G,N,P"):
        parse_offload("4")


def test_cli_reports_dataset_errors_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", "--model", str(tmp_path), "--dataset", "gsm8k", "--manifest", str(tmp_path / "m.json"),
               "--implementation", "baseline", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "dataset manifest not found" in capsys.readouterr().err


def test_run_needs_a_case_file_or_the_hand_flags_not_both(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--model", str(tmp_path)]) == 2
    assert "run needs --case PATH, or --dataset --implementation --out" in capsys.readouterr().err
    assert main(["run", "--case", str(tmp_path / "c.json"), "--model", str(tmp_path)]) == 2
    assert "--case gives the whole case; drop --model" in capsys.readouterr().err
    assert main(["run", "--case", str(tmp_path / "c.json")]) == 2
    assert "c.json" in capsys.readouterr().err


def test_run_reads_the_case_file_the_runner_writes(tmp_path: Path) -> None:
    """``run --case`` gives run_cases exactly what the case file says (runners.launching.case_command writes it)."""
    from results_schema.records.case import AccuracyCaseSettings, CaseSpec
    from runners.incase.accuracy.cli import build_parser, run_kwargs

    case = CaseSpec(kind="accuracy", phase="accuracy", label="current_g4_n1", implementation="current", repeat=0,
                    runtime="cpu", model="/m", offload=offload(4, 1).model_dump(), record=str(tmp_path / "x.json"),
                    accuracy=AccuracyCaseSettings(tasks=("gsm8k", "gpqa"), manifest=str(FIXTURE_MANIFEST),
                                                  protocol="boxed-chat-v1", limit=3, out_dir=str(tmp_path / "x")))
    write_json(tmp_path / "x.case.json", case)
    kw = run_kwargs(build_parser().parse_args(["run", "--case", str(tmp_path / "x.case.json")]))
    assert kw == dict(model="/m", manifest=str(FIXTURE_MANIFEST), datasets=["gsm8k", "gpqa"],
                      implementation="current", offload=offload(4, 1), out_dir=str(tmp_path / "x"),
                      engine_settings=None, limit=3, label="current_g4_n1", protocol="boxed-chat-v1")


def test_each_task_records_the_hosts_load_over_its_generate_call(tmp_path: Path, tiny_model_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Injected host readings: 3 s of foreign CPU over a 2 s generate call of the first task (1.5 foreign cores:
    contended by the throughput cases' rule), none over the second's."""
    from runners.incase import host_load
    from runners.incase.accuracy import case as case_module

    readings = iter([host_load.HostReading(wall_s=0.0, host_busy_s=0.0, host_total_s=0.0, steal_s=0.0, case_s=0.0,
                                           runner_s=0.0),
                     host_load.HostReading(wall_s=2.0, host_busy_s=5.0, host_total_s=8.0, steal_s=0.0, case_s=2.0,
                                           runner_s=0.0),
                     host_load.HostReading(wall_s=3.0, host_busy_s=5.0, host_total_s=8.0, steal_s=0.0, case_s=2.0,
                                           runner_s=0.0),
                     host_load.HostReading(wall_s=5.0, host_busy_s=7.0, host_total_s=12.0, steal_s=0.0, case_s=4.0,
                                           runner_s=0.0)])
    monkeypatch.setattr(case_module, "read_host", lambda: next(readings))
    run = make_run(tmp_path / "r", tiny_model_dir, cases=(("baseline", offload()),))
    first = read_json(run / "cases" / "baseline.gsm8k.result.json", AccuracyResult)
    second = read_json(run / "cases" / "baseline.gpqa.result.json", AccuracyResult)
    assert first.host_load is not None and second.host_load is not None
    assert (first.host_load.foreign_cpu_s, first.host_load.foreign_cores, first.host_load.contended) == (3.0, 1.5, True)
    assert (second.host_load.foreign_cpu_s, second.host_load.contended) == (0.0, False)


def test_a_real_reading_is_recorded_where_the_host_can_be_read(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = make_run(tmp_path / "r", tiny_model_dir, cases=(("baseline", offload()),), datasets=("gsm8k",))
    result = read_json(run / "cases" / "baseline.gsm8k.result.json", AccuracyResult)
    assert result.host_load is not None and result.host_load.wall_s >= 0  # this host has /proc/stat

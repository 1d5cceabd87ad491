"""Matrix verifier: passes identical runs, fails each kind of difference with a message naming it."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from analysis.accuracy.verifier import (
    main,
    render_markdown,
    verify,
    write_report,
)
from analysis.accuracy.checks import Checks as _Checks
from analysis.accuracy.checks import check_gold_balance as _check_gold_balance
from results_schema.records.accuracy import AccuracyExample, AccuracyResult, AccuracyVerification, ProtocolSpec
from results_schema.codec.io import read_json, write_json
from results_schema.records.models import RuntimeEvidence
from runners.incase.accuracy.materialize import materialize
from runners.incase.accuracy.qwen_chat import shuffle_order

from .conftest import FakeEngine, make_run, offload


def _fails(report: AccuracyVerification) -> list[str]:
    return [f"{c.name}: {c.message}" for c in report.checks if c.status == "fail"]


def _result_path(run: Path, label: str, task: str) -> Path:
    return run / "cases" / f"{label}.{task}.result.json"


def _rewrite_result(path: Path, **updates: object) -> AccuracyResult:
    """Replace fields of a result file, keeping it schema-valid (protocol hash recomputed)."""
    r = read_json(path, AccuracyResult)
    data = r.model_dump(mode="json")
    data.update(updates)
    data["protocol_sha256"] = ProtocolSpec.model_validate(data["protocol"]).sha256()
    new = AccuracyResult.model_validate(data)
    path.unlink()
    write_json(path, new)
    return new


@pytest.fixture
def run(tmp_path: Path, tiny_model_dir: Path) -> Path:
    return make_run(tmp_path / "run", tiny_model_dir)


def test_identical_fake_runs_pass_in_limited_mode_and_say_so_everywhere(run: Path) -> None:
    report = verify(run, limit=50)
    assert report.passed, _fails(report)
    assert report.mode == "limited" and "LIMITED" in report.mode_note and "NOT formal" in report.mode_note
    md = render_markdown(report)
    assert md.splitlines()[0].startswith("# Accuracy verification -- LIMITED")
    assert md.rstrip().endswith("_LIMITED (--limit 50): smoke run only, NOT formal accuracy evidence_")
    assert {(c.task, c.label) for c in report.cases} == {
        (t, lab) for t in ("gsm8k", "gpqa") for lab in ("baseline", "current_g4_n1", "current_g2_n1")}
    assert all(c.identical_to_baseline and c.drop_vs_baseline == 0 for c in report.cases)
    json_path, md_path = write_report(run, report)
    assert read_json(json_path, AccuracyVerification) == report
    assert "LIMITED" in md_path.read_text()


def test_formal_mode_requires_full_counts(run: Path) -> None:
    report = verify(run)
    msgs = _fails(report)
    assert report.mode == "formal" and not report.passed
    assert any("counts: case baseline (gsm8k)" in m and "formal mode needs 1319" in m for m in msgs)
    assert any("counts: case current_g4_n1 (gpqa)" in m and "formal mode needs 198" in m for m in msgs)


def test_changed_sampling_in_one_case_is_refused_naming_the_field(run: Path) -> None:
    path = _result_path(run, "current_g2_n1", "gsm8k")
    r = read_json(path, AccuracyResult)
    proto = r.protocol.model_dump(mode="json")
    proto["sampling"]["temperature"] = 0.7
    _rewrite_result(path, protocol=proto)
    report = verify(run, limit=50)
    msgs = _fails(report)
    assert any(m.startswith("protocol: refusing to compare case current_g2_n1 (gsm8k) with baseline baseline")
               and "sampling.temperature baseline=0.0 case=0.7" in m for m in msgs), msgs
    assert any(m.startswith("registered: case current_g2_n1 (gsm8k) claims protocol qwen-chat-v1 but its spec")
               and "sampling.temperature registered=0.0 recorded=0.7" in m for m in msgs), msgs
    # a refused case gets no identity / drop verdict and no comparative summary row
    assert not any(c.name in ("identity", "drop") and c.label == "current_g2_n1" and c.task == "gsm8k"
                   for c in report.checks)
    assert ("gsm8k", "current_g2_n1") not in {(c.task, c.label) for c in report.cases}


def test_changed_protocol_in_one_case_is_refused_naming_the_field(run: Path) -> None:
    path = _result_path(run, "current_g4_n1", "gpqa")
    r = read_json(path, AccuracyResult)
    proto = r.protocol.model_dump(mode="json")
    proto["system_message"] = "Answer quickly."
    _rewrite_result(path, protocol=proto)
    msgs = _fails(verify(run, limit=50))
    assert any(m.startswith("protocol: refusing to compare case current_g4_n1 (gpqa)")
               and "system_message" in m for m in msgs), msgs


def test_two_registered_protocols_in_one_comparison_are_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = make_run(tmp_path / "mix", tiny_model_dir, cases=(("baseline", offload()),), protocol="qwen-chat-v1")
    make_run(tmp_path / "mix", tiny_model_dir, cases=(("current", offload(4, 1)),), protocol="boxed-chat-v1")
    report = verify(run, limit=50)
    msgs = _fails(report)
    assert not report.passed
    for task in ("gsm8k", "gpqa"):
        assert any(m.startswith(f"protocol: refusing to compare case current_g4_n1 ({task}) with baseline baseline: "
                                "they were scored under different protocol specs (baseline qwen-chat-v1 sha256 ")
                   and "case boxed-chat-v1 sha256 " in m for m in msgs), msgs
    assert not any(c.name == "registered" and c.status == "fail" for c in report.checks)  # both are registered
    assert all(c.protocol_name == "qwen-chat-v1" for c in report.cases)


def test_another_registered_protocol_alone_passes(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = make_run(tmp_path / "boxed", tiny_model_dir, protocol="boxed-chat-v1")
    report = verify(run, limit=50)
    assert report.passed, _fails(report)
    assert {c.protocol_name for c in report.cases} == {"boxed-chat-v1"}


def test_unregistered_protocol_name_fails(run: Path) -> None:
    for path in sorted((run / "cases").glob("*.gpqa.result.json")):
        proto = read_json(path, AccuracyResult).protocol.model_dump(mode="json")
        proto["name"] = "my-own-v1"
        _rewrite_result(path, protocol=proto, protocol_name="my-own-v1")
    msgs = _fails(verify(run, limit=50))
    assert any(m.startswith("registered: case baseline (gpqa) was scored under protocol 'my-own-v1', which is not "
                            "registered (registered: boxed-chat-v1, boxed-chat-v2, chat-addition-v1, qwen-chat-v1)") for m in msgs), msgs


def test_changed_engine_setting_fails(run: Path) -> None:
    path = _result_path(run, "current_g4_n1", "gsm8k")
    eng = read_json(path, AccuracyResult).engine.model_dump(mode="json")
    eng["dtype"] = "float32"
    _rewrite_result(path, engine=eng)
    assert any("engine.dtype baseline=None case='float32'" in m for m in _fails(verify(run, limit=50)))


def test_dataset_hash_mismatch_against_manifest_fails(run: Path, tmp_path: Path) -> None:
    # all cases agree with each other, but the manifest declares another hash
    manifest = json.loads(Path(read_json(_result_path(run, "baseline", "gsm8k"),
                                         AccuracyResult).dataset_manifest_path).read_text())
    for d in manifest["datasets"]:
        if d["task"] == "gsm8k":
            d["sha256"] = "f" * 64
    alt = tmp_path / "alt" / "manifest.json"
    alt.parent.mkdir()
    alt.write_text(json.dumps(manifest))
    msgs = _fails(verify(run, limit=50, manifest=alt))
    assert any(m.startswith("dataset_hash: dataset hash mismatch in case baseline (gsm8k)") and "f" * 64 in m
               for m in msgs), msgs


def test_dataset_hash_differs_between_cases_fails(run: Path) -> None:
    path = _result_path(run, "current_g2_n1", "gpqa")
    ds = read_json(path, AccuracyResult).dataset.model_dump(mode="json")
    ds["sha256"] = "e" * 64
    _rewrite_result(path, dataset=ds)
    msgs = _fails(verify(run, limit=50))
    assert any("dataset differs from baseline in case current_g2_n1 (gpqa): dataset.sha256" in m for m in msgs), msgs


def _drop_row(run: Path, label: str, task: str, index: int, *, fix_hash: bool) -> None:
    rpath = _result_path(run, label, task)
    r = read_json(rpath, AccuracyResult)
    epath = rpath.parent / r.examples_path
    lines = epath.read_text().splitlines(keepends=True)
    del lines[index]
    epath.write_text("".join(lines))
    if fix_hash:
        _rewrite_result(rpath, examples_sha256=hashlib.sha256(epath.read_bytes()).hexdigest())


def test_missing_example_row_fails_naming_the_row(run: Path) -> None:
    _drop_row(run, "current_g4_n1", "gsm8k", 3, fix_hash=True)
    msgs = _fails(verify(run, limit=50))
    assert any(m.startswith("examples: examples current_g4_n1.gsm8k.examples.jsonl: missing example row index 3")
               for m in msgs), msgs
    assert any(m.startswith("identity: examples of case current_g4_n1 (gsm8k) differ from baseline") for m in msgs)


def test_tampered_examples_file_fails_on_hash(run: Path) -> None:
    _drop_row(run, "current_g2_n1", "gpqa", 0, fix_hash=False)
    msgs = _fails(verify(run, limit=50))
    assert any("examples file" in m and "recorded in the result" in m for m in msgs), msgs


def test_missing_examples_file_fails(run: Path) -> None:
    (run / "cases" / "current_g2_n1.gpqa.examples.jsonl").unlink()
    assert any("examples file missing" in m for m in _fails(verify(run, limit=50)))


def test_different_outputs_fail_identity_and_drop(tmp_path: Path, tiny_model_dir: Path) -> None:
    class Twisted(FakeEngine):
        twist = staticmethod(lambda i, text: "garbage" if i == 2 else text)

    run = make_run(tmp_path / "a", tiny_model_dir, datasets=("gsm8k",),
                   cases=(("baseline", offload()),), engine_factory=FakeEngine)
    make_run(tmp_path / "a", tiny_model_dir, datasets=("gsm8k",), cases=(("current", offload(4, 1)),),
             engine_factory=Twisted)
    report = verify(run, limit=50)
    msgs = _fails(report)
    assert any(m.startswith("identity: examples of case current_g4_n1 (gsm8k) differ from baseline")
               and "first difference at row 2 (row-2)" in m and "output_text" in m for m in msgs), msgs
    case = next(c for c in report.cases if c.label == "current_g4_n1")
    assert not case.identical_to_baseline


def test_accuracy_drop_fails(tmp_path: Path, tiny_model_dir: Path) -> None:
    class Right(FakeEngine):
        def generate(self, prompts, sampling):  # type: ignore[no-untyped-def]
            gens = super().generate(prompts, sampling)
            return [g.__class__(text="A", token_ids=(65,), finish_reason="stop") for g in gens]

    class Wrong(FakeEngine):
        def generate(self, prompts, sampling):  # type: ignore[no-untyped-def]
            gens = super().generate(prompts, sampling)
            return [g.__class__(text="maybe", token_ids=(1,), finish_reason="length") for g in gens]

    run = make_run(tmp_path / "r", tiny_model_dir, datasets=("gpqa",), cases=(("baseline", offload()),),
                   engine_factory=Right)
    make_run(tmp_path / "r", tiny_model_dir, datasets=("gpqa",), cases=(("sync", offload(2, 1)),),
             engine_factory=Wrong)
    report = verify(run, limit=50)
    assert any(m.startswith("drop: accuracy 0.0000 vs baseline") and "(any drop fails)" in m
               for m in _fails(report))
    sync = next(c for c in report.cases if c.label == "sync_g2_n1")
    assert sync.unparsable == 12 and sync.correct == 0


def test_no_baseline_or_no_offload_case_fails(tmp_path: Path, tiny_model_dir: Path) -> None:
    only_offload = make_run(tmp_path / "a", tiny_model_dir, datasets=("gsm8k",),
                            cases=(("current", offload(4, 1)),))
    assert any("expected exactly one baseline case, found 0" in m for m in _fails(verify(only_offload, limit=9)))
    only_base = make_run(tmp_path / "b", tiny_model_dir, datasets=("gsm8k",), cases=(("baseline", offload()),))
    assert any("no offload case" in m for m in _fails(verify(only_base, limit=9)))
    assert any("no *.result.json" in m for m in _fails(verify(tmp_path / "empty", limit=9)))


def test_limited_mode_counts_must_match_the_limit(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = make_run(tmp_path / "r", tiny_model_dir, limit=3)
    assert verify(run, limit=3).passed
    msgs = _fails(verify(run, limit=5))
    assert any("has 3 examples, limited mode expects min(--limit 5, rows 8) = 5" in m for m in msgs), msgs
    formal = _fails(verify(run))
    assert any("was run with --limit 3" in m for m in formal)


def _gold_rows(golds: str) -> list[AccuracyExample]:
    rows = []
    for i, g in enumerate(golds):
        order = [1, 2, 3]
        order.insert("ABCD".index(g), 0)
        rows.append(AccuracyExample(index=i, example_id=f"r{i}", row={}, prompt_sha256="0" * 64, prompt_tokens=1, gold=g,
                                    option_order=tuple(order), parsed=None, correct=False, unparsable=True,
                                    output_tokens=0, output_token_sha256="0" * 64, finish_reason="stop",
                                    output_text=""))
    return rows


def test_gold_balance_fails_when_every_gold_is_d() -> None:
    checks = _Checks()
    _check_gold_balance(checks, "gpqa", _gold_rows("D" * 198), None)
    assert checks.items[0].status == "fail" and "D=198 (100%)" in checks.items[0].message


def test_gold_balance_passes_for_the_shuffle_over_198_questions() -> None:
    golds = "".join("ABCD"[shuffle_order("0", f"question {i}").index(0)] for i in range(198))
    checks = _Checks()
    _check_gold_balance(checks, "gpqa", _gold_rows(golds), None)
    assert checks.items[0].status == "pass", checks.items[0].message


def test_gold_balance_is_skipped_and_labelled_for_small_limited_runs() -> None:
    checks = _Checks()
    _check_gold_balance(checks, "gpqa", _gold_rows("D" * 12), 12)
    assert checks.items[0].status == "skipped" and "limited mode" in checks.items[0].message


def _synthetic_full_manifest(root: Path) -> Path:
    rng = random.Random(7)
    gsm = root / "gsm8k.jsonl"
    with open(gsm, "w") as f:
        for i in range(1319):
            a, b = rng.randint(1, 99), rng.randint(1, 99)
            f.write(json.dumps({"question": f"What is {a} plus {b}? (item {i})", "answer": f"{a}+{b}\n#### {a + b}"})
                    + "\n")
    gpqa = root / "gpqa.jsonl"
    with open(gpqa, "w") as f:
        for i in range(198):
            f.write(json.dumps({"Question": f"Synthetic question {i}?", "Correct Answer": f"right {i}",
                                "Incorrect Answer 1": f"w1 {i}", "Incorrect Answer 2": f"w2 {i}",
                                "Incorrect Answer 3": f"w3 {i}", "Record ID": f"rec{i}"}) + "\n")
    out = root / "full"
    materialize("gsm8k", out, from_file=gsm, revision="synthetic")
    materialize("gpqa", out, from_file=gpqa, revision="synthetic")
    return out / "manifest.json"


def _evidence(g: int, n: int, impl: str) -> RuntimeEvidence:
    layers = tuple(i for i in range(8) if i % g >= g - n)
    return RuntimeEvidence(offloader_class="offload.prefetch.CurrentPrefetchOffloader", implementation=impl,
                           offload_group_size=g, offload_num_in_group=n, offload_prefetch_step=1, num_layers=8,
                           selected_layers=layers, wrapped_layers=layers, wrapped_count=len(layers),
                           offloaded_bytes=295_936 * len(layers), static_buffer_bytes=0,
                           released_bytes=295_936 * len(layers), post_init_called=True, pid=1, device="cpu")


@pytest.mark.heavy  # measured 1.5 s in the fast tier (its budget is 2 minutes)
def test_formal_mode_passes_full_counts_with_evidence(tmp_path: Path, tiny_model_dir: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _synthetic_full_manifest(tmp_path)
    run = tmp_path / "run"
    for impl, off in (("baseline", offload()), ("current", offload(4, 1)), ("current", offload(2, 1))):
        if off.enabled:
            ev = tmp_path / f"ev-{off.offload_group_size}.json"
            write_json(ev, _evidence(off.offload_group_size, off.offload_num_in_group, impl))
            monkeypatch.setenv("OFFLOAD_EVIDENCE_PATH", str(ev))
        else:
            monkeypatch.delenv("OFFLOAD_EVIDENCE_PATH", raising=False)
        make_run(run, tiny_model_dir, manifest=manifest, cases=((impl, off),))
    assert any("test engine, which is never formal evidence" in m for m in _fails(verify(run)))
    for path in sorted((run / "cases").glob("*.result.json")):  # pretend the cases ran on vLLM
        _rewrite_result(path, engine_name="vllm", vllm_version="0.32.0", torch_version="2.13.0+cpu")
    report = verify(run)
    assert report.mode == "formal" and report.passed, _fails(report)
    assert "FORMAL" in render_markdown(report).splitlines()[0]
    assert {c.num_examples for c in report.cases if c.task == "gsm8k"} == {1319}
    assert {c.num_examples for c in report.cases if c.task == "gpqa"} == {198}
    balance = next(c for c in report.checks if c.name == "gold_balance")
    assert balance.status == "pass"
    # formal mode refuses an offload case without evidence
    path = _result_path(run, "current_g2_n1", "gsm8k")
    _rewrite_result(path, evidence=None)
    assert any("has no runtime offload evidence" in m for m in _fails(verify(run)))


def test_cli_exit_codes_and_label(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(run), "--limit", "50"]) == 0
    out = capsys.readouterr().out
    assert "LIMITED (--limit 50)" in out and "PASSED" in out
    assert main([str(run), "--no-write"]) == 1
    assert "FORMAL" in capsys.readouterr().out
    assert main([str(run), "--limit", "50", "--report-dir", str(run / "elsewhere")]) == 0
    assert read_json(run / "elsewhere" / "accuracy-verification.json", AccuracyVerification).passed
    bad = _result_path(run, "baseline", "gsm8k")
    bad.write_text(bad.read_text().replace('"accuracy"', '"accuracy_typo"'))
    assert main([str(run), "--limit", "50"]) == 2


def test_repeats_of_a_case_must_be_identical(tmp_path: Path, tiny_model_dir: Path) -> None:
    class Twisted(FakeEngine):
        twist = staticmethod(lambda i, text: "other" if i == 0 else text)

    root = tmp_path / "records"
    for rep in ("r0", "r1"):
        make_run(root / f"baseline-{rep}", tiny_model_dir, datasets=("gsm8k",), cases=(("baseline", offload()),))
        make_run(root / f"cur-{rep}", tiny_model_dir, datasets=("gsm8k",), cases=(("current", offload(4, 1)),),
                 engine_factory=Twisted if rep == "r1" else FakeEngine)
    report = verify(root, limit=50)
    checks = {(c.name, c.label): c for c in report.checks if c.name in ("repeats", "baseline_agreement")}
    assert checks[("baseline_agreement", "baseline")].status == "pass"
    assert "2 baseline runs agree" in checks[("baseline_agreement", "baseline")].message
    assert checks[("repeats", "current_g4_n1")].status == "fail"
    assert "2 different examples hashes" in checks[("repeats", "current_g4_n1")].message


def test_every_case_drifting_together_still_fails_against_the_registry(run: Path) -> None:
    for path in sorted((run / "cases").glob("*.gsm8k.result.json")):
        proto = read_json(path, AccuracyResult).protocol.model_dump(mode="json")
        proto["sampling"]["max_tokens"] = 64
        _rewrite_result(path, protocol=proto)
    msgs = _fails(verify(run, limit=50))
    assert any(m.startswith("registered: case baseline (gsm8k) claims protocol qwen-chat-v1")
               and "sampling.max_tokens registered=512 recorded=64" in m for m in msgs), msgs


def test_wilson_interval_matches_the_closed_form_and_the_report_prints_it() -> None:
    import pytest as _pytest

    from analysis.accuracy.checks import wilson_interval

    assert wilson_interval(32, 64) == _pytest.approx((0.38102, 0.61898), abs=1e-5)
    assert wilson_interval(0, 8) == _pytest.approx((0.0, 0.32441), abs=1e-5)
    assert wilson_interval(8, 8) == _pytest.approx((0.67559, 1.0), abs=1e-5)
    with _pytest.raises(ValueError, match=r"correct \(9\) must be in \[0, n=8\]"):
        wilson_interval(9, 8)


def test_report_shows_the_first_examples_as_text_baseline_beside_offload(tmp_path: Path, tiny_model_dir: Path) -> None:
    class Twisted(FakeEngine):
        twist = staticmethod(lambda i, text: "a <b>|c</b>\nno number" if i == 1 else text)

    run = make_run(tmp_path / "a", tiny_model_dir, datasets=("gsm8k",), cases=(("baseline", offload()),))
    make_run(tmp_path / "a", tiny_model_dir, datasets=("gsm8k",), cases=(("current", offload(4, 1)),),
             engine_factory=Twisted)
    report = verify(run, limit=50)
    assert [(s.task, s.index) for s in report.samples] == [("gsm8k", 0), ("gsm8k", 1), ("gsm8k", 2)]
    first, second = report.samples[0], report.samples[1]
    assert first.question.startswith("A baker makes 24 muffins") and first.gold == "12"
    assert [(r.label, r.implementation) for r in first.replies] == [("baseline", "baseline"),
                                                                   ("current_g4_n1", "current")]
    base, off = first.replies
    assert off.identical_to_baseline and off.output_text == base.output_text and base.output_text.startswith("Step")
    assert (off.parsed, off.correct) == (base.parsed, base.correct) and base.parsed is not None
    twisted = second.replies[1]
    assert (twisted.output_text, twisted.parsed, twisted.correct, twisted.identical_to_baseline) == (
        "a <b>|c</b>\nno number", None, False, False)
    md = render_markdown(report)
    assert "## Examples (first rows of each task: baseline beside offload)" in md
    assert (f"| gsm8k | 0 | {first.question} | 12 | baseline | Step by step... so the total is "
            f"\\\\boxed{{{base.parsed}}}.<br>The answer is {base.parsed}. | {base.parsed} | "
            f"{'yes' if base.correct else 'no'} | (baseline) |") in md
    assert "| | | | | current_g4_n1 | a &lt;b&gt;\\|c&lt;/b&gt;<br>no number | unparsable | no | NO |" in md
    json_path, _ = write_report(run, report)
    assert read_json(json_path, AccuracyVerification).samples == report.samples

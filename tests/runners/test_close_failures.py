"""A close that fails is not a finished run: one line, ``EXIT_IO``, no ``SHA256SUMS``; a resume redoes the close."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from runners.errors import EXIT_IO, EXIT_MEANINGS, EXIT_OK, io_error, os_error_text
from runners.orchestration.close import CloseStepError, close_step
from results_schema.codec.files import write_text_atomic
from tests.runners.helpers import compose_cfg, run_fake

ONE_POINT = "phases.same_runtime.points=[{g: 4, n: 1}]"


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_the_io_exit_code_is_its_own_in_the_one_list() -> None:
    assert EXIT_IO in EXIT_MEANINGS and "disk full" in EXIT_MEANINGS[EXIT_IO]
    assert len(set(EXIT_MEANINGS)) == len(EXIT_MEANINGS)


def test_the_atomic_writer_names_the_file_a_full_disk_stopped(tmp_path: Path, monkeypatch) -> None:
    def full(fd: int) -> None:
        raise _enospc()

    monkeypatch.setattr(os, "fsync", full)
    target = tmp_path / "summary" / "report.html"
    with pytest.raises(OSError) as info:
        write_text_atomic(target, "<html>")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert os_error_text(info.value) == f"{target}: No space left on device (ENOSPC)"
    assert not target.exists() and list(target.parent.iterdir()) == []  # no temporary file left


def test_a_close_step_error_names_the_step_the_file_and_the_cause(tmp_path: Path) -> None:
    with pytest.raises(CloseStepError) as info:
        with close_step("report", tmp_path / "summary" / "report.html"):
            raise _enospc()
    assert info.value.text(tmp_path) == (f"close (report): {tmp_path}/summary/report.html: "
                                         "No space left on device (ENOSPC)")
    with pytest.raises(CloseStepError) as other:
        with close_step("analysis", tmp_path / "summary"):
            raise KeyError("throughput_tok_s")
    line = other.value.text(tmp_path)
    assert line.startswith(f"close (analysis): {tmp_path}/summary: KeyError: 'throughput_tok_s'")
    assert line.endswith("(traceback: logs/close-error.txt)") and "\n" not in line
    assert "KeyError" in (tmp_path / "logs" / "close-error.txt").read_text()


def test_an_io_error_of_another_stage_is_one_line_with_how_to_resume(tmp_path: Path) -> None:
    exc = OSError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path / "same_runtime-runs.jsonl"))
    err = io_error("execute", exc, tmp_path)
    assert err.exit_code == EXIT_IO and "\n" not in str(err)
    assert str(err).startswith(f"execute: {tmp_path}/same_runtime-runs.jsonl: Permission denied (EACCES); ")
    assert f"resume={tmp_path}" in str(err) and str(err).endswith(f"exit {EXIT_IO}")


@pytest.mark.heavy  # a fake-bench matrix with analysis, then its resume (8 s CPU)
def test_a_failed_report_writes_no_checksums_and_a_resume_redoes_only_the_close(tmp_path: Path, monkeypatch,
                                                                                 capsys) -> None:
    import analysis.report.summary as summary
    from runners.matrix import run_matrix

    real = summary.write_report_html

    def full_disk(run_dir: Path, *args: object, **kwargs: object) -> Path:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(summary, "write_report_html", full_disk)
    code, run_dir = run_fake(tmp_path, ONE_POINT, "analyze=true")
    out = capsys.readouterr().out
    last = [ln for ln in out.splitlines() if ln.strip()][-1]
    assert code == EXIT_IO, out
    assert last.startswith("error: close (analysis): ") and "No space left on device (ENOSPC)" in last, last
    assert f"resume={run_dir}` redoes the close only; exit {EXIT_IO}" in last and "Traceback" not in out
    assert not (run_dir / "SHA256SUMS").exists() and not (run_dir / "summary" / "report.html").exists()
    runs = (run_dir / "same_runtime-runs.jsonl").read_bytes()

    monkeypatch.setattr(summary, "write_report_html", real)  # the cause is gone
    resume = [f"resume={run_dir}", "progress=false"]
    assert run_matrix(compose_cfg(*resume), resume) == EXIT_OK
    out = capsys.readouterr().out
    assert "removing the incomplete summary/" in out and "0 ok" in out  # no case ran again
    assert [ln for ln in out.splitlines() if ln.strip()][-1].startswith("validation: VALID")
    assert (run_dir / "SHA256SUMS").is_file() and (run_dir / "summary" / "report.html").is_file()
    assert (run_dir / "same_runtime-runs.jsonl").read_bytes() == runs


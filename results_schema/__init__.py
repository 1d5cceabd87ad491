"""Strict pydantic models of everything written to disk, and the only way to read and write them.

Modules:
    base       shared field types and ``StrictModel`` (frozen, extra forbidden, finite floats)
    models     bench record, runtime evidence, case run, case failure (re-exports base and validation)
    validation validation report of ``analysis.validation.validate``
    serving    serving case result, run lines (re-exports serving_spec and serving_summary)
    serving_spec, serving_summary   serving case specification; serving summary rows
    manifest   environment manifest (runner)
    accuracy   accuracy results and examples (accuracy)
    io         ``append_jsonl`` / ``read_jsonl`` / ``write_json`` / ``read_json`` (strict, atomic, fsynced)
    files      ``write_bytes_atomic`` / ``write_text_atomic`` / ``file_sha256`` (re-exported by io)
    dispatch   file name -> model table used by ``python -m results_schema check``
    cli        ``python -m results_schema export DIR | check PATH...``

Must not import vLLM or torch.
"""

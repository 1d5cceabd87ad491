"""Strict pydantic models of everything written to disk, and the only way to read and write them.

Modules:
    models     bench record, runtime evidence, case run, case failure, validation report
    manifest   environment manifest (runner)
    accuracy   accuracy results and examples (accuracy)
    io         ``append_jsonl`` / ``read_jsonl`` / ``write_json`` / ``read_json`` (strict, atomic, fsynced)
    dispatch   file name -> model table used by ``python -m results_schema check``
    cli        ``python -m results_schema export DIR | check PATH...``

Must not import vLLM or torch.
"""

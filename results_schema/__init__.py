"""Strict pydantic models of everything written to disk, and the only way to read and write them.

Subpackages, by concept (layered in ``pyproject.toml``: ``cli`` > ``reading`` > ``rules`` > ``records``):

* ``results_schema.records`` - one model per file kind a run writes (``models``: bench record, runtime
  evidence, case run; ``accuracy``, ``serving``, ``manifest``, ``plan``, ``summary``, ``validation``,
  ``choice``, ...), the file-name table (``dispatch``) and the codec: ``io`` (strict, atomic, fsynced
  ``append_jsonl`` / ``read_jsonl`` / ``write_json`` / ``read_json``), ``files``, and the msgspec
  structs derived field for field from the models (``fast_structs``, ``fast_json``);
* ``results_schema.rules`` - rules the live runner and the offline analysis share (evidence, tokens,
  accuracy baselines, the bench log line);
* ``results_schema.reading`` - reading many records at once into columns (``table_scan``, ``columns``);
* ``results_schema.cli`` - ``python -m results_schema export DIR | check PATH...``.

A case process imports ``records`` and ``rules`` only (``runners.identity.case_code``).
Must not import vLLM or torch.
"""

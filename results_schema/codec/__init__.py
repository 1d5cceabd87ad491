"""The codec: bytes on disk <-> the ``results_schema.records`` models, for any model.

``io`` (strict JSON / JSONL reading and validated, durable writing: ``read_json``, ``read_jsonl``,
``append_jsonl``, ``write_json``), ``files`` (the atomic writer, the file hash, the line rules),
``fast_structs`` (the msgspec structs derived field for field from a model) and ``fast_json`` (the one-pass
reading through them). It names no record: which model a file holds is ``results_schema.records.dispatch``;
the records may use it (a record's own reader), never the reverse (import-linter layers contract).
"""

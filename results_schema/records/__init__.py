"""The records: one strict pydantic model per file kind a run writes, their shared key fields (``identity``) and
which file holds which (``dispatch``). Bytes on disk <-> a model is the codec, ``results_schema.codec``."""

"""The records: one strict pydantic model per file kind a run writes, their shared key fields (``identity``) and which file holds which (``dispatch``); the codec is ``results_schema.codec``."""

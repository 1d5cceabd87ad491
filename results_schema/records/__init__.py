"""The records: one strict pydantic model per file kind a run writes, and their codec (``io``, ``files``)."""

"""Identity: what a run is made of, observed and compared with what the config declares.

Modules: ``gates`` (the identity and health gates of a run), ``pin_checks`` (pins compared,
tree hashes, the case-code hash, the environment manifest), ``probe`` (``python -m
runners.identity.probe``: pins observed inside a runtime), ``runtimes`` (runtime command
prefixes and path maps), ``published_identity`` (published tree hashes), ``devices`` (device
identity and logical -> physical mapping), ``numerics`` (what numerics depend on), ``health``
(the health command and its verdict), ``model_manifest`` (a model directory's ``SHA256SUMS``).
"""

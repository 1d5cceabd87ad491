"""Identity: what a run is made of, observed and compared with what the config declares.

Modules: ``gates`` (the identity and health gates of a run), ``pin_checks`` (declared pins compared
with observed values, fail closed), ``git_identity`` (revision and dirty flag), ``config_hash``
(the config's SHA-256), ``manifest`` (the environment manifest), ``case_code`` (the case-code hash),
``pins_file`` (``+pins=FILE`` expanded into overrides), ``probe`` (``python -m runners.identity.probe``:
pins observed inside a runtime, file and tree hashes), ``runtimes`` (runtime command prefixes and path
maps), ``published_identity`` (published tree hashes), ``devices`` (device identity and logical ->
physical mapping), ``numerics`` (what numerics depend on), ``health`` (the health command and its
verdict), ``model_manifest`` (a model directory's ``SHA256SUMS``).
"""

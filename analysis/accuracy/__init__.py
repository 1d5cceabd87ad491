"""The accuracy-equivalence verifier: do offload cases say exactly what the baseline says?

Modules: ``verifier`` (``verify``, ``write_report``; ``python -m analysis.accuracy.verifier``),
``checks`` (one function per check), ``baselines`` (baseline repeats agree), ``table`` (the CSV).
"""

"""Noise-aware comparisons: the verdict rule, the noise floor, Pareto fronts, the decision table.

Modules: ``compare`` (current vs official, per label vs baseline, ...), ``verdict_rule`` (t interval
over processes or blocks and equivalence margin), ``sequential`` (group-sequential looks with alpha spending on top
of the verdict rule: stop a label when its answer is known), ``sequential_verdict`` (a sequential phase's verdict of
record: each label's stopping look, recomputed), ``noise_floor``, ``pareto``, ``decision``, ``variance`` (where the
noise lives: between processes, between rounds), ``shared_time`` (whether it is a shift shared by the arms of one
block of time, and what pairing by block buys).
"""

"""Planning: the config expanded into validated, scheduled cases before any process starts.

Modules: ``cases`` (``PhaseCase``, ``ScheduledCase``, ``LaunchSpec``: the data every layer above
reads), ``plan`` (expand phases and points into ``ScheduledCase`` items, rotated schedule),
``workload_check`` (a phase's effective workload against ``WorkloadSpec``), ``serving_spec`` (a
serving phase: its settings checked, its ``ServingCaseSpec`` and argv), ``blocks`` (a sequential phase's ABBA
block order).
"""

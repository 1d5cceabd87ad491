"""Planning: the config expanded into validated, scheduled cases before any process starts.

Modules: ``plan`` (expand phases and points into ``ScheduledCase`` items, rotated schedule),
``workload_check`` (a phase's effective workload against ``WorkloadSpec``), ``serving_spec`` (a
serving phase: its settings checked, its ``ServingCaseSpec``, its process outcome -> lines).
"""

"""Planning: the config expanded into validated, scheduled cases before any process starts.

Modules: ``plan`` (expand phases and points into ``runners.cases.ScheduledCase`` items through each phase's
kind, ``runners.kinds``; rotated schedule), ``workload_check`` (a phase's effective workload against
``WorkloadSpec``), ``layer_names`` (``offload_params`` patterns against the model's parameter names),
``choose_plan`` (a choose run's need and model sizes), ``blocks`` (a sequential phase's ABBA block order).
"""

"""Launching: how a scheduled case becomes a process (command line, environment, executor).

Modules: ``case_command`` (the case's ``case.json``, argv and environment), ``executor_base`` /
``executors`` (local and Ray executors), ``ray_scheduling`` / ``ray_tasks`` (Ray placement and the
task that runs a case on a node). The process group itself: ``runners.incase.process_group``.
"""

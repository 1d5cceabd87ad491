"""Hydra config package of the offload benchmark (``python -m runners.matrix``).

Importing this package registers every group's dataclass schema in Hydra's
``ConfigStore`` (``base_<group>``), so YAML files can extend them through their
``defaults`` list and a misspelt key fails at compose time. Tests compose with
``initialize_config_module(config_module="conf")``.
"""

from conf.schema import register_configs

register_configs()

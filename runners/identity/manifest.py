"""The environment manifest of a run: what the run is made of, as one ``EnvironmentManifest``.

What is modelled: ``build_manifest`` assembles the host (name, Python, platform), git identity
(``runners.identity.git_identity``), package versions, the evaluated pins, model and ``offload/``
tree identity, the case-code hash, devices, the config (its plain data, non-finite floats as text:
``results_schema.rules.config_rule.non_finite_as_text``, and ``config_sha256``), the
overrides and the environment restricted to what may be recorded
(``runners.incase.recorded_env.recordable_env``: an allow-list plus the runtimes' declared names,
secrets never).

What is deliberately not modelled: observing any of it (``runners.identity.gates``,
``runners.identity.probe``, ``runners.identity.devices``), writing it (``runners.orchestration.rundir``).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from datetime import datetime, timezone
from typing import Iterable, Mapping, Sequence

from conf.schema import Config
from results_schema.records.manifest import DeviceIdentity, EnvironmentManifest, GitIdentity, ModelIdentity, PinCheck
from runners.identity.config_hash import config_sha256
from runners.identity.git_identity import git_identity
from runners.identity.probe import package_version
from runners.incase.recorded_env import recordable_env
from conf.typed import plain_config
from results_schema.rules.config_rule import non_finite_as_text


json_safe = non_finite_as_text
"""``results_schema.rules.config_rule.non_finite_as_text``: the config's plain data as the manifest records it (a
non-finite float as its text ``"inf"`` / ``"-inf"`` / ``"nan"``; ``non_finite_from_text`` reads it back)."""


def build_manifest(*, run_id: str, experiment: str, packages: Sequence[str] | Mapping[str, str | None],
                   checks: Sequence[PinCheck],
                   model: ModelIdentity, offload_tree: str, devices: Sequence[DeviceIdentity],
                   config: Config, overrides: Sequence[str], case_code: str,
                   git: GitIdentity | None = None,
                   env: Mapping[str, str] | None = None, declared_env: Iterable[str] = ()) -> EnvironmentManifest:
    """Assemble the environment manifest.

    Args:
        run_id, experiment: the run's names.
        packages: versions by distribution, or distribution names to look up here (``package_version``).
        checks: the identity gate's evaluated pins.
        model, offload_tree, devices, case_code: identity observed by the gate (hashes as SHA-256 hex).
        config, overrides: the typed config (recorded as its plain data and ``config_sha256``) and the overrides.
        git: the repository's identity; None = observed here (``git_identity``).
        env: the environment to record (``os.environ`` when None), restricted by ``recordable_env``;
            ``declared_env``: the runtimes' declared names, recorded besides the allow-list.

    Raises:
        IdentityError: ``git`` is None and ``git status`` fails.
    """

    data = non_finite_as_text(plain_config(config))
    return EnvironmentManifest(
        run_id=run_id, experiment=experiment,
        created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        hostname=socket.gethostname(), python_version=sys.version, platform=platform.platform(),
        git=git or git_identity(),
        packages=dict(packages) if isinstance(packages, Mapping) else {p: package_version(p) for p in packages},
        pins=tuple(checks), model=model, offload_tree_sha256=offload_tree, case_code_sha256=case_code,
        devices=tuple(devices), config_sha256=config_sha256(config), config=data, overrides=tuple(overrides),
        environment=recordable_env(os.environ if env is None else env, declared_env),
    )

"""scripts/install_env.py: pip's configuration reaches uv unchanged (indexes, find-links, constraints, cert)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("install_env", ROOT / "scripts" / "install_env.py")
assert _spec is not None and _spec.loader is not None
install_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_env)

# `pip config list` on this machine (environment scope first, then the global file)
LISTING = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
"""


def test_pip_settings_split_lists_and_drop_repeats_across_scopes() -> None:
    s = install_env.pip_settings(LISTING)
    assert s["find-links"] == ["/opt/wheels"]
    assert s["extra-index-url"] == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    assert s["constraint"] == ["/etc/xdg/pip/constraints.txt"]
    assert s["default-timeout"] == ["180"]


def test_uv_gets_every_index_the_constraints_and_best_match_across_indexes() -> None:
    args, env = install_env.uv_options(install_env.pip_settings(LISTING))
    assert args == ["--find-links", "/opt/wheels",
                    "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
                    "--constraint", "/etc/xdg/pip/constraints.txt", "--index-strategy", "unsafe-best-match"]
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}


def test_an_unconfigured_pip_gives_uv_no_flags_and_an_index_url_is_carried() -> None:
    assert install_env.uv_options(install_env.pip_settings("")) == ([], {})
    args, _ = install_env.uv_options(install_env.pip_settings("user.index-url='https://mirror.example/simple'\n"))
    assert args == ["--index-url", "https://mirror.example/simple"]

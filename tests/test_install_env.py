"""scripts/install_env.py: pip's configuration reaches uv unchanged (indexes, find-links, constraints, cert)."""

from __future__ import annotations

from pathlib import Path
from tests.scripts_module import load_script

ROOT = Path(__file__).resolve().parents[1]
install_env = load_script("install_env")

# `pip config list` on this machine (system pip 23.2.1: the environment first, then the global file)
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
    args, _ = install_env.uv_options(install_env.pip_settings("global.index-url='https://mirror.example/simple'\n"))
    assert args == ["--index-url", "https://mirror.example/simple"]


def test_one_entry_per_line_in_pip_conf_gives_one_flag_per_entry() -> None:
    # pip prints a multi-line ini value with repr: a literal \n between the entries
    s = install_env.pip_settings("global.extra-index-url='\\nhttps://a.example/simple\\nhttps://b.example/simple'\n")
    assert s["extra-index-url"] == ["https://a.example/simple", "https://b.example/simple"]


def test_the_section_pip_install_prefers_replaces_the_others_and_other_commands_sections_are_ignored() -> None:
    listing = ("global.constraint='/g.txt'\ninstall.constraint='/i.txt'\ndownload.find-links='/dl'\n"
               "global.index-url='https://file.example/simple'\n:env:.index-url='https://env.example/simple'\n")
    s = install_env.pip_settings(listing)
    assert s["constraint"] == ["/i.txt"] and s["index-url"] == ["https://env.example/simple"]
    assert "find-links" not in s


def test_no_index_and_the_timeout_alias_are_carried_and_an_untranslated_setting_stops_with_exit_2(capsys) -> None:
    args, env = install_env.uv_options(install_env.pip_settings("global.no-index='true'\nglobal.timeout='60'\n"))
    assert args == ["--no-index"] and env == {"UV_HTTP_TIMEOUT": "60"}
    try:
        install_env.uv_options(install_env.pip_settings("global.trusted-host='mirror.example'\n"))
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("an untranslated pip setting was dropped silently")
    assert "trusted-host='mirror.example'" in capsys.readouterr().err

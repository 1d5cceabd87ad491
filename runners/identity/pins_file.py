"""The pins file: ``+pins=FILE`` on a command line replaced by the Hydra overrides the file holds.

What is modelled: reading a pins file (YAML, a mapping with ``overrides:`` as a list of strings, as
``python -m runners.pins --out FILE`` writes it) and expanding each ``+pins=FILE`` / ``pins=FILE``
argument in place, so overrides given after it win. ``runners.matrix`` and ``runners.pins`` both read
pins files through this module.

What is deliberately not modelled: observing pins and writing the file (``runners.pins``), checking
them (``runners.identity.pin_checks``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


class PinsError(RuntimeError):
    """Bad arguments, an unreadable pins file or a config that does not compose (exit ``runners.errors.EXIT_CONFIG``)."""


def read_pins_file(path: str) -> list[str]:
    """The ``overrides`` list of a pins file.

    Raises:
        PinsError: missing/unreadable file or not a mapping with a list of strings under ``overrides``.
    """
    import yaml

    p = Path(path).expanduser()
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise PinsError(f"+pins={path}: cannot read the pins file ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise PinsError(f"+pins={path}: not YAML ({str(exc).splitlines()[0]})") from None
    ov = data.get("overrides") if isinstance(data, dict) else None
    if not isinstance(ov, list) or not all(isinstance(o, str) for o in ov):
        raise PinsError(f"+pins={path}: expected a mapping with `overrides:` as a list of strings "
                        "(the file `python -m runners.pins --out FILE` writes)")
    return list(ov)


def expand_pins_args(args: Sequence[str]) -> list[str]:
    """Replace each ``+pins=FILE`` (or ``pins=FILE``) argument by the file's overrides, in place.

    Raises:
        PinsError: see :func:`read_pins_file`.
    """
    out: list[str] = []
    for a in args:
        if a.startswith(("+pins=", "pins=")):
            out += read_pins_file(a.split("=", 1)[1])
        else:
            out.append(a)
    return out

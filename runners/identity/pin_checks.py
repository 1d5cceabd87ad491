"""Pin checks: declared pins against observed values; refuse to run on any mismatch.

What is modelled: the pins a runtime declares
(checked in this order: tools, packages, package trees, wheels, source trees,
source commits, files, package wheels (an installed distribution's package files against the
wheel it was installed from), then model and offload tree). A source
tree or offload tree pin written ``sha256sum:<hex>`` is compared with the published tree hash
(``runners.identity.probe.sha256sum_tree``), a bare hex with the project's.

Where: each runtime's pins are observed inside that runtime by ``runners.identity.probe``
(its own interpreter / command prefix, see ``runners.identity.runtimes``); ``check_pins`` then
compares declared and observed values here.

Fail closed: a pin whose value is ``???`` (declared, not provided) is a mismatch,
as is an absent file/package/tool. The error lists every failed pin with its
expected and observed value and the override that would set it.

What is deliberately not modelled: observing (hashes of files and trees, package versions:
``runners.identity.probe``), git identity (``runners.identity.git_identity``), the config hash
(``runners.identity.config_hash``), the environment manifest (``runners.identity.manifest``),
health gates (``runners.identity.health``), device mapping (``runners.identity.devices``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from conf.schema_stack import PinsConfig
from results_schema.codec.files import file_sha256
from runners.identity.probe import PUBLISHED_PREFIX, SPEC_KEYS, Observation, WheelComparison
from results_schema.records.manifest import PinCheck, PinKind
from runners.identity.probe import observe

MISSING_VALUE = "???"


class IdentityError(RuntimeError):
    """A declared pin does not match (or could not be observed). Stops the run."""

    def __init__(self, message: str, checks: Sequence[PinCheck] = ()) -> None:
        super().__init__(message)
        self.checks = tuple(checks)


def version_ok(expected: str, actual: str | None) -> bool:
    """Whether an observed package version satisfies a declared one: a specifier (``==0.23.*``, ``>=2``) by PEP 440,
    else exact text equality; an absent (None) or unparsable version never does."""
    if actual is None:
        return False
    spec = expected.strip()
    if spec and spec[0] in "=<>!~":
        try:
            return Version(actual) in SpecifierSet(spec)
        except (InvalidSpecifier, InvalidVersion):
            return False
    return actual == spec


def _declared(value: Any) -> str:
    return MISSING_VALUE if value is None else str(value)


PIN_KINDS: tuple[tuple[str, PinKind], ...] = (("tools", "tool"), ("packages", "package"), ("package_trees", "package_tree"), ("wheels", "wheel"),
             ("source_trees", "source_tree"), ("source_commits", "source_commit"), ("files", "file"))
"""``PinsConfig`` field -> ``PinCheck.kind``, in the documented check order."""

PATH_KEYS = ("wheels", "source_trees", "source_commits", "files")
"""Pin fields keyed by a path (read at ``runtime.path_map``'s location, see ``runners.identity.runtimes.map_path``)."""


def observed_field(field_name: str, declared: Any) -> str:
    """The probe key observing one pin: ``source_trees_sha256sum`` for a source tree pinned in the published
    format (``sha256sum:<hex>``, ``runners.identity.published_identity``), else the pin's own field."""
    if field_name == "source_trees" and str(declared).startswith(PUBLISHED_PREFIX):
        return "source_trees_sha256sum"
    return field_name


def observed_values(obs: Observation, key: str) -> Mapping[str, str | None]:
    """The probe's observations of one ``SPEC_KEYS`` entry other than ``package_wheels`` (name -> value)."""
    if key not in SPEC_KEYS or key == "package_wheels":
        raise ValueError(f"probe key {key!r}: allowed {[k for k in SPEC_KEYS if k != 'package_wheels']}")
    values: Mapping[str, str | None] = obs[key]  # type: ignore[literal-required]  # checked against SPEC_KEYS
    return values


def declared_pins(pins: PinsConfig, field_name: str) -> dict[str, str]:
    """The pins of one kind (``PIN_KINDS``): ``tools`` as names (value ``""``), the others name -> declared value."""
    if field_name == "tools":
        return {str(n): "" for n in pins.tools}
    value: dict[str, str] = getattr(pins, field_name)
    return value


def probe_spec(pins: PinsConfig, path_of: Any = None) -> dict[str, list[str]]:
    """What ``runners.identity.probe`` must observe for ``pins`` (paths mapped through ``path_of``; each source tree
    in the format its pin is written in, see ``observed_field``)."""
    spec: dict[str, list[str]] = {"tools": [str(n) for n in pins.tools]}
    for field_name, _ in PIN_KINDS[1:]:  # tools: names only, above
        spec[field_name] = []
        if field_name == "source_trees":
            spec["source_trees_sha256sum"] = []
        if field_name == "wheels":
            spec["package_wheels"] = [f"{d}={path_of(str(w)) if path_of is not None else w}"
                                      for d, w in pins.package_wheels.items() if w != MISSING_VALUE]
        for name, declared in declared_pins(pins, field_name).items():
            key = path_of(str(name)) if field_name in PATH_KEYS and path_of is not None else str(name)
            spec[observed_field(field_name, declared)].append(str(key))
    return spec


def package_wheel_check(dist: str, wheel: str, seen: WheelComparison | None, runtime: str | None) -> PinCheck:
    """The ``package_wheel`` check of one distribution from the probe's ``wheel_vs_installed`` observation.

    ``expected`` is the package tree hash of the wheel, ``actual`` that of the installed RECORD's package
    files (``runners.identity.probe.wheel_vs_installed``); ``detail`` names the wheel and the first differing files.
    """
    if wheel == MISSING_VALUE:
        return PinCheck(kind="package_wheel", name=dist, expected=MISSING_VALUE, actual=None, ok=False, runtime=runtime)
    if seen is None:
        return PinCheck(kind="package_wheel", name=dist, expected=f"package tree of {wheel}", actual=None, ok=False,
                        runtime=runtime, detail=f"{dist} is not installed, or {wheel} is not a readable wheel")
    n = seen["differing_count"]
    ok = n == 0 and seen["wheel"] == seen["installed"]
    detail = None if ok else (f"{n} of {seen['files']} package files differ from {wheel}; first: "
                              + ", ".join(seen["differing"]))
    return PinCheck(kind="package_wheel", name=dist, expected=seen["wheel"], actual=seen["installed"],
                    ok=ok, runtime=runtime, detail=detail)


def check_pins(pins: PinsConfig, *, model_dir: Path | None, model_pin: str | None, model_revision: str | None,
               observed_revision: str | None, offload_pin: str | None, offload_actual: str,
               observed: Observation | None = None, path_of: Any = None,
               runtime: str | None = None) -> list[PinCheck]:
    """Evaluate every declared pin, in the documented order.

    Args:
        pins: the declared pins (``???`` values = declared, not provided).
        model_dir: model directory (None when it does not exist).
        model_pin: declared SHA-256 of the model's SHA256SUMS; None = not pinned.
        model_revision: declared model revision; None = not pinned.
        observed_revision: revision recorded next to the model (``REVISION`` file), if any.
        offload_pin: declared ``offload/`` tree hash; None = not pinned.
        offload_actual: observed ``offload/`` tree hash.
        observed: what ``runners.identity.probe`` observed inside the runtime for ``probe_spec(pins, path_of)``;
            None = observe here, in this interpreter.
        path_of: declared path -> path to read (``runtime.path_map``); None = identity.
        runtime: runtime name recorded in each check (None for model / offload checks).

    Returns:
        One ``PinCheck`` per declared pin.
    """

    path_of = path_of or (lambda x: x)
    spec = probe_spec(pins, path_of)
    obs = observe(spec) if observed is None else observed
    out: list[PinCheck] = []
    for field_name, kind in PIN_KINDS:
        declared = declared_pins(pins, field_name)
        for name in declared:
            key = path_of(str(name)) if field_name in PATH_KEYS else str(name)
            seen = observed_values(obs, field_name if field_name == "tools" else observed_field(field_name, declared[name]))
            actual = seen.get(key)
            actual = None if actual is None else str(actual)
            if field_name == "tools":
                out.append(PinCheck(kind=kind, name=str(name), expected="on PATH", actual=actual, ok=actual is not None,
                                    runtime=runtime))
                continue
            want = declared[name]
            if field_name == "packages":
                ok = want != MISSING_VALUE and version_ok(str(want), actual)
            else:
                ok = want != MISSING_VALUE and actual == want
            out.append(PinCheck(kind=kind, name=str(name), expected=_declared(want), actual=actual, ok=ok,
                                runtime=runtime))
    out += [package_wheel_check(str(d), str(w), obs["package_wheels"].get(f"{d}={path_of(str(w))}"),
                                runtime) for d, w in pins.package_wheels.items()]
    if model_pin is not None:
        sums = model_dir / "SHA256SUMS" if model_dir is not None else None
        actual = file_sha256(sums) if sums is not None and sums.is_file() else None
        out.append(PinCheck(kind="model_sha256sums", name="model", expected=model_pin, actual=actual,
                            ok=model_pin != MISSING_VALUE and actual == model_pin))
    if model_revision is not None:
        out.append(PinCheck(kind="model_revision", name="model", expected=model_revision, actual=observed_revision,
                            ok=model_revision != MISSING_VALUE and observed_revision == model_revision))
    if offload_pin is not None:
        out.append(PinCheck(kind="offload_tree", name="offload", expected=offload_pin, actual=offload_actual,
                            ok=offload_pin != MISSING_VALUE and offload_actual == offload_pin))
    return out


def describe_failure(check: PinCheck) -> str:
    """One actionable sentence naming what differs (runtime, pin, expected and observed value)."""
    where = f"[{check.runtime}] " if check.runtime else ""
    if check.kind == "tool":
        return f"{where}required tool {check.name!r} is not on PATH"
    if check.expected == MISSING_VALUE:
        seen = "nothing is observed here (absent)" if check.actual is None else f"observed {check.actual!r}"
        return (f"{where}pin {check.kind} {check.name!r} is declared but has no value (???); {seen}. "
                "Provide it as an override to run (fail closed)")
    detail = f" ({check.detail})" if check.detail else ""
    if check.actual is None:
        return (f"{where}pin {check.kind} {check.name!r}: expected {check.expected!r}, but it is missing on this "
                f"machine{detail}")
    return f"{where}pin {check.kind} {check.name!r}: expected {check.expected!r}, observed {check.actual!r}{detail}"


def enforce(checks: Sequence[PinCheck], *, when: str, hint: str = "") -> None:
    """Raise ``IdentityError`` listing every failed pin with expected and observed values.

    The first line names the first failure and counts the others (``(+N more: kind:name, ...)``);
    then one line per failed pin. Runtimes that share pins (two phases on the same stack)
    yield the same check twice; each ``runtime/kind/name`` is listed once.

    Args:
        checks: evaluated pins.
        when: where in the run the gate stands (message prefix).
        hint: appended as a last line (e.g. how to write the observed values).
    """
    bad = [c for c in checks if not c.ok]
    if not bad:
        return
    unique = list({(c.runtime, c.kind, c.name): c for c in bad}.values())
    first = f"{unique[0].kind}:{unique[0].name}"
    others = [n for n in dict.fromkeys(f"{c.kind}:{c.name}" for c in unique[1:]) if n != first]
    more = f" (+{len(others)} more: {', '.join(others)})" if others else ""
    lines = [f"identity gate ({when}): {describe_failure(unique[0])}{more}"]
    if len(unique) > 1:
        lines += [f"  - {describe_failure(c)}" for c in unique]
    if hint:
        lines.append(hint)
    raise IdentityError("\n".join(lines), checks)

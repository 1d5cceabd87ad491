"""Layer selection rule (shared/cases/README.md table) and parameter validation."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.selection import is_layer_selected, select_offload_layers, validate_offload_params

CASES = [
    (8, 4, 1, (3, 7)),
    (8, 4, 2, (2, 3, 6, 7)),
    (8, 2, 1, (1, 3, 5, 7)),
    (8, 1, 1, tuple(range(8))),
    (7, 3, 1, (2, 5)),
    (12, 4, 4, tuple(range(12))),
    (28, 28, 1, (27,)),
    (28, 14, 1, (13, 27)),
    (28, 28, 2, (26, 27)),
    (28, 8, 1, (7, 15, 23)),
    (28, 7, 1, (6, 13, 20, 27)),
    (28, 14, 2, (12, 13, 26, 27)),
    (28, 8, 2, (6, 7, 14, 15, 22, 23)),
    (28, 5, 2, (3, 4, 8, 9, 13, 14, 18, 19, 23, 24)),
]


@pytest.mark.parametrize(("layers", "g", "n", "expected"), CASES)
def test_selects_the_documented_layers(layers, g, n, expected):
    assert select_offload_layers(layers, g, n) == expected


@pytest.mark.parametrize("layers", [0, 1, 8, 28])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_group_size_zero_disables_offload(layers, n):
    assert select_offload_layers(layers, 0, n) == ()


@pytest.mark.parametrize("g", [1, 4, 28])
def test_num_in_group_zero_disables_offload(g):
    assert select_offload_layers(28, g, 0) == ()


def test_rejects_num_in_group_larger_than_group_size_naming_both():
    with pytest.raises(ValueError, match=r"offload_num_in_group \(3\) must be <= offload_group_size \(2\)"):
        select_offload_layers(8, 2, 3)


@pytest.mark.parametrize(("g", "n", "name"), [(-1, 1, "offload_group_size"), (4, -2, "offload_num_in_group")])
def test_rejects_negative_values_naming_them(g, n, name):
    with pytest.raises(ValueError, match=rf"{name} \(-\d\) must be >= 0"):
        validate_offload_params(g, n)


def test_rejects_prefetch_step_below_one_while_enabled():
    with pytest.raises(ValueError, match=r"offload_prefetch_step \(0\) must be >= 1 while offload is enabled"):
        validate_offload_params(4, 1, 0)


def test_accepts_prefetch_step_zero_when_disabled():
    validate_offload_params(0, 1, 0)


def test_rejects_unknown_backend_naming_it():
    with pytest.raises(ValueError, match=r"offload_backend \('cuda_magic'\) must be one of"):
        validate_offload_params(4, 1, 1, "cuda_magic")


@given(st.integers(0, 64), st.integers(1, 16), st.data())
def test_selection_is_the_last_n_of_every_complete_or_partial_group(layers, g, data):
    n = data.draw(st.integers(0, g))
    sel = select_offload_layers(layers, g, n)
    assert list(sel) == sorted(set(sel))
    assert all(0 <= i < layers for i in sel)
    for start in range(0, layers, g):
        group = range(start, min(start + g, layers))
        chosen = [i for i in group if i in sel]
        assert chosen == [i for i in group if i - start >= g - n]
    assert sel == tuple(i for i in range(layers) if is_layer_selected(i, g, n))
    # count: N per complete group, plus the tail of the partial group
    full, rest = divmod(layers, g)
    assert len(sel) == full * n + max(0, rest - (g - n))


def test_offload_package_and_selection_do_not_import_torch():
    code = "import sys, offload, offload.selection, offload.matching, offload.ring; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.heavy  # imports vLLM in a child (5 s CPU)
def test_offload_package_imports_no_hydra_pandas_or_runners():
    code = (
        "import sys, offload.prefetch, offload.factory, offload.plugin, offload.backend;"
        "print(sorted(m for m in ('hydra', 'pandas', 'runners') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""Factory contract: vLLM's offload_backend honoured; invalid settings raise before load."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from offload.factory import create_offloader, make_factory, read_offload_config, wants_our_offloader
from offload.prefetch import CurrentPrefetchOffloader, SyncOffloader

RUNNERS_OWN = object()


def runner_factory(cfg):
    return RUNNERS_OWN


def nested(backend="auto", g=0, n=1, step=1, params=()):
    return SimpleNamespace(
        offload_backend=backend,
        prefetch=SimpleNamespace(offload_group_size=g, offload_num_in_group=n, offload_prefetch_step=step,
                                 offload_params=set(params)),
        uva=SimpleNamespace(cpu_offload_gb=0, cpu_offload_params=set()),
    )


def flat(g=0, n=1, step=1):
    """Older vLLM (e.g. 0.9 / vLLM-Ascend v0.18 era): fields directly on the config."""
    return SimpleNamespace(offload_group_size=g, offload_num_in_group=n, offload_prefetch_step=step)


@pytest.mark.parametrize("g", [0, 4])
def test_uva_keeps_the_runners_offloader(g):
    assert create_offloader(nested("uva", g=g), runner_factory) is RUNNERS_OWN


@pytest.mark.parametrize(("g", "n"), [(0, 1), (4, 0)])
def test_auto_with_offload_disabled_keeps_the_runners_offloader(g, n):
    assert create_offloader(nested("auto", g=g, n=n), runner_factory) is RUNNERS_OWN


@pytest.mark.parametrize("backend", ["auto", "prefetch"])
def test_auto_or_prefetch_with_valid_group_creates_ours(backend):
    off = create_offloader(nested(backend, g=4, n=2, step=3, params={"mlp"}), runner_factory)
    assert type(off) is CurrentPrefetchOffloader
    assert (off.group_size, off.num_in_group, off.prefetch_step, off.offload_params) == (4, 2, 3, ("mlp",))


def test_sync_implementation_creates_the_reference_offloader():
    assert type(create_offloader(nested(g=2, n=1), runner_factory, "sync")) is SyncOffloader


def test_flat_config_of_older_vllm_is_read():
    s = read_offload_config(flat(8, 2, 2))
    assert (s.backend, s.group_size, s.num_in_group, s.prefetch_step) == ("auto", 8, 2, 2)
    assert isinstance(create_offloader(flat(8, 2, 2), runner_factory), CurrentPrefetchOffloader)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (nested(g=2, n=3), r"offload_num_in_group \(3\) must be <= offload_group_size \(2\)"),
        (nested(g=-1), r"offload_group_size \(-1\) must be >= 0"),
        (nested(g=4, n=-1), r"offload_num_in_group \(-1\) must be >= 0"),
        (nested(g=4, n=1, step=0), r"offload_prefetch_step \(0\) must be >= 1 while offload is enabled"),
        (nested("magic", g=4), r"offload_backend \('magic'\) must be one of"),
        (nested("prefetch", g=4, n=0), r"offload_backend 'prefetch' needs offload_group_size \(4\) >= 1 and offload_num_in_group \(0\) >= 1"),
    ],
)
def test_invalid_settings_raise_naming_the_values(cfg, message):
    with pytest.raises(ValueError, match=message):
        create_offloader(cfg, runner_factory)
    with pytest.raises(ValueError, match=message):
        wants_our_offloader(cfg)


def test_unknown_implementation_is_rejected():
    with pytest.raises(ValueError, match=r"implementation \('official'\) must be one of"):
        create_offloader(nested(g=4), runner_factory, "official")


def test_patched_factory_reads_offload_impl_at_call_time(monkeypatch):
    factory = make_factory(runner_factory, "current")
    monkeypatch.setenv("OFFLOAD_IMPL", "sync")
    assert type(factory(nested(g=4))) is SyncOffloader
    monkeypatch.setenv("OFFLOAD_IMPL", "official")
    assert factory(nested(g=4)) is RUNNERS_OWN
    monkeypatch.delenv("OFFLOAD_IMPL")
    assert type(factory(nested(g=4))) is CurrentPrefetchOffloader


def test_real_vllm_offload_config_is_honoured():
    from vllm.config import OffloadConfig
    from vllm.config.offload import PrefetchOffloadConfig
    from vllm.model_executor.offloader.base import NoopOffloader
    from vllm.model_executor.offloader.base import create_offloader as vllm_create

    cfg = OffloadConfig(prefetch=PrefetchOffloadConfig(offload_group_size=4, offload_num_in_group=1,
                                                       offload_prefetch_step=2, offload_params={"mlp"}))
    off = create_offloader(cfg, vllm_create)
    assert type(off) is CurrentPrefetchOffloader and off.offload_params == ("mlp",)
    assert isinstance(create_offloader(OffloadConfig(), vllm_create), NoopOffloader)
    # vLLM's own validator already rejects N > G when the config is built
    with pytest.raises(ValueError, match=r"offload_num_in_group \(3\) must be <= offload_group_size \(2\)"):
        OffloadConfig(prefetch=PrefetchOffloadConfig(offload_group_size=2, offload_num_in_group=3))

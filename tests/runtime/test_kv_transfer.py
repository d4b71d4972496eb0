"""KV transfer: the tensor codec, the in-process transport, and Ray's object store."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.runtime.kv_transfer import (
    InProcessTransport,
    KVLostError,
    ObjectStoreTransport,
    decode_tensors,
    encode_tensors,
    get_transport,
    payload_num_bytes,
)


@dataclass(frozen=True, eq=False)
class _Payload:
    request_id: str
    token_ids: tuple[int, ...]
    k: torch.Tensor
    v: torch.Tensor
    extra: dict


def _payload(num_tokens: int = 5, dtype: torch.dtype = torch.float32, seed: int = 0) -> _Payload:
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(2, num_tokens, 2, 4, generator=g).to(dtype)
    v = torch.randn(2, num_tokens, 2, 4, generator=g).to(dtype)
    return _Payload("r0", tuple(range(num_tokens)), k, v, {"ids": [torch.arange(3)]})


def _same(a: _Payload, b: _Payload) -> bool:
    return (
        a.request_id == b.request_id
        and a.token_ids == b.token_ids
        and a.k.dtype == b.k.dtype
        and torch.equal(a.k, b.k)
        and torch.equal(a.v, b.v)
        and torch.equal(a.extra["ids"][0], b.extra["ids"][0])
    )


@settings(max_examples=25, deadline=None)
@given(
    num_tokens=st.integers(min_value=1, max_value=40),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_codec_round_trip_is_exact(num_tokens: int, dtype: torch.dtype, seed: int) -> None:
    """encode -> decode returns equal tensors of the same dtype (bf16 shipped as its bits)."""
    p = _payload(num_tokens, dtype, seed)
    enc = encode_tensors(p)
    assert not isinstance(enc.k, torch.Tensor)
    assert payload_num_bytes(enc) == payload_num_bytes(p) > 0
    assert _same(decode_tensors(enc), p)


def test_codec_shares_memory_for_cpu_tensors() -> None:
    """Encoding a contiguous CPU tensor does not copy it (zero-copy on the sending side)."""
    t = torch.arange(12, dtype=torch.float32)
    enc = encode_tensors({"t": t})
    assert np.shares_memory(enc["t"].array, t.numpy())


def test_in_process_transport_send_receive_release() -> None:
    tr = InProcessTransport()
    p = _payload()
    h = tr.send(p, request_id="r0", num_tokens=5)
    assert (h.request_id, h.num_tokens, h.num_bytes) == ("r0", 5, payload_num_bytes(p))
    assert tr.receive(h) is p
    tr.release(h)
    assert len(tr) == 0
    with pytest.raises(KVLostError):
        tr.receive(h)


def test_transport_registry_and_kind_check() -> None:
    assert isinstance(get_transport("in_process"), InProcessTransport)
    with pytest.raises(ValueError, match="unknown KV transport 'nccl'"):
        get_transport("nccl")
    h = InProcessTransport().send(_payload())
    with pytest.raises(ValueError, match="in_process"):
        ObjectStoreTransport().receive(h)


# -- through Ray's object store, between two actors --------------------------------------


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.ray
def test_object_store_between_actors(ray_local) -> None:
    """A sender actor's payload arrives bit-exact at a receiver actor via the handle."""
    ray = ray_local

    @ray.remote(num_cpus=0)
    class Sender:
        def __init__(self) -> None:
            self.tr = ObjectStoreTransport()

        def send(self, n: int):
            return self.tr.send(_payload(n, torch.bfloat16, 7), request_id="r0", num_tokens=n)

    @ray.remote(num_cpus=0)
    class Receiver:
        def checksum(self, handle) -> tuple[float, float, str, tuple[int, ...]]:
            p = ObjectStoreTransport().receive(handle)
            return float(p.k.float().sum()), float(p.v.float().sum()), str(p.k.dtype), p.token_ids

    sender, receiver = Sender.remote(), Receiver.remote()
    handle = ray.get(sender.send.remote(33))
    want = _payload(33, torch.bfloat16, 7)
    got = ray.get(receiver.checksum.remote(handle))
    assert got == (
        float(want.k.float().sum()),
        float(want.v.float().sum()),
        "torch.bfloat16",
        want.token_ids,
    )
    assert handle.num_bytes == payload_num_bytes(want)

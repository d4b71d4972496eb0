"""KV transfer: the tensor codec and the in-process transport.

The object-store transport between two actors on two nodes is exercised in test_worker_ray.py
(prefill and decode workers on one shared Ray cluster).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.runtime.transport.by_name import get_transport
from pearl.runtime.transport.kv_transfer import (
    InProcessTransport,
    KVLostError,
    ObjectStoreTransport,
    decode_tensors,
    encode_tensors,
    map_object_store_pages,
    payload_num_bytes,
    register_transport,
)

from ._kv_helpers import _Payload, _payload


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


def test_object_store_handle_is_small_and_picklable() -> None:
    """The handle routes through the driver: it pickles to a few hundred bytes at most."""
    import pickle

    from pearl.runtime.transport.kv_transfer import KVHandle

    h = KVHandle("object_store", "t0#1", ("ref-stand-in",), 1 << 30, 4096)
    assert pickle.loads(pickle.dumps(h)) == h
    assert len(pickle.dumps(h)) < 400


def test_register_transport_adds_a_named_transport() -> None:
    """A new transport (e.g. NCCL on GPU clusters) plugs in by name; malformed ones are refused."""

    @register_transport
    class Loopback(InProcessTransport):
        name = "test_loopback"

    tr = get_transport("test_loopback")
    assert isinstance(tr, Loopback)
    assert tr.receive(tr.send({"x": 1}, request_id="r")) == {"x": 1}

    class Nameless:
        name = ""

    class NoRelease:
        name = "no_release"

        def send(self, payload):
            return payload

        def receive(self, handle):
            return handle

    for bad in (Nameless, NoRelease):
        with pytest.raises(ValueError):
            register_transport(bad)


def test_codec_leaves_tensor_free_parts_alone() -> None:
    """Containers without tensors come back as the same objects (not walked and rebuilt);
    tensors nested anywhere are still encoded, and decoding restores them."""
    ids = tuple(range(1000))
    meta = {"ids": ids, "names": ["a", "b"], "n": 3}
    enc = encode_tensors(meta)
    assert enc is meta
    p = _payload()
    enc_p = encode_tensors(p)
    assert enc_p is not p
    assert enc_p.token_ids is p.token_ids
    assert not isinstance(enc_p.extra["ids"][0], torch.Tensor)
    assert payload_num_bytes(enc_p) == payload_num_bytes(p)
    mixed = [1, "x", torch.ones(2), (2.0, None)]
    dec = decode_tensors(encode_tensors(mixed))
    assert dec[:2] == [1, "x"] and dec[3] is mixed[3] and torch.equal(dec[2], mixed[2])
    assert payload_num_bytes(ids) == 0


# -- object store (Ray) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster():
    pytest.importorskip("ray")
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from pearl.runtime.local_cluster import LocalCluster

    c = LocalCluster(head_cpus=1)
    c.connect()
    yield c
    c.shutdown()


class _Sender:
    """Owns the objects it sends (as a prefill worker does)."""

    def put_ones(self, num_bytes: int):
        import ray

        return (ray.put(np.ones(num_bytes, dtype=np.uint8)),)

    def send(self, num_tokens: int, seed: int):
        return ObjectStoreTransport().send(
            _payload(num_tokens, torch.bfloat16, seed), request_id="r0", num_tokens=num_tokens
        )


@pytest.mark.ray
def test_object_store_round_trip_zero_copy_and_lost_owner(ray_cluster) -> None:
    """A payload sent by an actor arrives equal (bf16 included) as read-only views on the
    store's shared memory (no copy on receive); after the sending actor dies, `receive`
    raises KVLostError (once Ray has dropped the dead owner's objects)."""
    import ray

    num_tokens = 8000  # 256 KiB per tensor: stored in shared memory, not inlined
    sender = ray.remote(num_cpus=0)(_Sender).remote()
    handle = ray.get(sender.send.remote(num_tokens, 7))
    got = ObjectStoreTransport().receive(handle)
    want = _payload(num_tokens, torch.bfloat16, 7)
    assert _same(got, want)
    assert handle.num_bytes == payload_num_bytes(want) and handle.num_tokens == num_tokens
    raw = ray.get(handle.ref[0])  # the stored object itself: read-only shared memory
    assert not raw.k.array.flags.writeable
    assert got.k.data_ptr() == raw.k.array.ctypes.data  # receive made no copy
    assert got.v.data_ptr() == raw.v.array.ctypes.data
    del got, raw
    unread = ray.get(sender.send.remote(num_tokens, 8))  # owned by the sender, never fetched
    ray.kill(sender, no_restart=True)
    # ray.kill is asynchronous: a call made right after it may still be served
    gone_by = time.monotonic() + 30
    while True:
        try:
            ray.get(sender.send.remote(1, 0))
        except ray.exceptions.RayActorError:
            break  # the sender is gone
        assert time.monotonic() < gone_by, "the killed sender still answers after 30 s"
        time.sleep(0.1)
    # Ray drops a dead owner's objects asynchronously: until then a receiver on the same
    # node may still read it; afterwards the KV is reported lost (never a hang or a crash).
    deadline = time.monotonic() + 60
    while True:
        try:
            ObjectStoreTransport().receive(unread)
        except KVLostError as err:
            assert "r0" in str(err)
            break
        assert time.monotonic() < deadline, "the KV of a dead sender never became lost"
        time.sleep(0.2)


def _minor_faults() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@pytest.mark.ray
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux page tables")
def test_map_object_store_pages_maps_existing_pages_only(ray_cluster) -> None:
    """After `map_object_store_pages`, reading an object another process wrote takes (almost)
    no page faults here; an object written afterwards still does. Contents are untouched."""
    import ray

    num_bytes = 8 << 20
    sender = ray.remote(num_cpus=0)(_Sender).remote()
    first = ray.get(ray.get(sender.put_ones.remote(num_bytes))[0])  # maps the store here
    assert map_object_store_pages(max_bytes=0) == 0
    assert map_object_store_pages() >= num_bytes // 4096
    faults = _minor_faults()
    assert int(first.sum()) == num_bytes
    mapped_faults = _minor_faults() - faults
    second = ray.get(ray.get(sender.put_ones.remote(num_bytes))[0])  # pages not mapped yet
    faults = _minor_faults()
    assert int(second.sum()) == num_bytes
    unmapped_faults = _minor_faults() - faults
    assert unmapped_faults >= 64 and mapped_faults * 4 < unmapped_faults
    ray.kill(sender)

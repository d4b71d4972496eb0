"""The one-machine shared-memory KV transport: round trips, segment reuse, stale reclaim,
and refusals (another machine, a sender gone, a full pool)."""

from __future__ import annotations

import dataclasses
import os
import pickle

import pytest
import torch

from pearl.runtime.transport.by_name import get_transport
from pearl.runtime.transport.kv_transfer import KVLostError
from pearl.runtime.transport.shm import SharedMemoryTransport, sweep_orphaned_segments

from ._kv_helpers import _payload


@pytest.fixture
def pair():
    sender, receiver = SharedMemoryTransport(), SharedMemoryTransport()
    yield sender, receiver
    receiver.close()
    sender.close()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int64])
def test_round_trip_is_exact_and_the_handle_is_small(pair, dtype) -> None:
    sender, receiver = pair
    p = _payload(7, dtype if dtype != torch.int64 else torch.float32)
    if dtype == torch.int64:
        p = dataclasses.replace(p, k=torch.arange(112).view(2, 7, 2, 4))
    handle = pickle.loads(pickle.dumps(sender.send(p, request_id="r0", num_tokens=7)))
    assert len(pickle.dumps(handle)) < 2048
    assert handle.num_bytes == p.k.nbytes + p.v.nbytes + 24
    got = receiver.receive(handle)
    assert got.token_ids == p.token_ids and got.k.dtype == p.k.dtype
    assert torch.equal(got.k, p.k) and torch.equal(got.v, p.v)
    assert torch.equal(got.extra["ids"][0], p.extra["ids"][0])
    receiver.check(handle)  # not reused while read
    receiver.release(handle)


def test_released_segments_are_reused(pair) -> None:
    sender, receiver = pair
    for i in range(5):
        h = sender.send(_payload(9, seed=i))
        assert torch.equal(receiver.receive(h).k, _payload(9, seed=i).k)
        receiver.release(h)
    assert len(sender._segments) == 1
    h1, h2 = sender.send(_payload(9)), sender.send(_payload(9, seed=1))  # both in flight
    assert len(sender._segments) == 2 and h1.ref.segment != h2.ref.segment


def test_a_stale_payload_is_reclaimed_and_its_late_receive_fails(pair) -> None:
    sender, receiver = pair
    sender.max_pool_bytes, sender.stale_after_s = 1 << 20, 0.0  # room for one segment
    old = sender.send(_payload(9))
    new = sender.send(_payload(9, seed=1))  # the pool is full: the unreleased one goes
    assert new.ref.segment == old.ref.segment and new.ref.generation > old.ref.generation
    with pytest.raises(KVLostError, match="reclaimed"):
        receiver.receive(old)
    assert torch.equal(receiver.receive(new).k, _payload(9, seed=1).k)
    receiver.release(old)  # a late release of the old generation frees nothing
    assert sender._segments[0].in_use


def test_a_full_pool_refuses_rather_than_overwriting(pair) -> None:
    sender, _ = pair
    sender.max_pool_bytes, sender.stale_after_s = 1 << 20, 3600.0
    sender.send(_payload(9))
    with pytest.raises(KVLostError, match="pool full"):
        sender.send(_payload(9))


def test_other_node_and_gone_sender_are_lost_kv(pair) -> None:
    sender, receiver = pair
    h = sender.send(_payload(3))
    elsewhere = dataclasses.replace(h, ref=dataclasses.replace(h.ref, node_id="other-node"))
    with pytest.raises(KVLostError, match="one machine"):
        receiver.receive(elsewhere)
    sender.close()  # the sender exits: its segments are unlinked
    with pytest.raises(KVLostError, match="gone"):
        receiver.receive(h)


def test_registry_knows_it_and_rejects_foreign_handles(pair) -> None:
    assert isinstance(get_transport("shared_memory"), SharedMemoryTransport)
    sender, receiver = pair
    other = get_transport("in_process")
    with pytest.raises(ValueError, match="given to 'shared_memory'"):
        receiver.receive(other.send(_payload(2)))


def test_workers_disaggregate_through_shared_memory_like_colocated() -> None:
    """Prefill and decode workers (each with its own transport, as two processes would
    have) serve multi-turn trajectories through shared memory; tokens equal one colocated
    engine, and the decode side releases every segment it imported (the pool is reused)."""
    import asyncio

    from pearl.runtime.worker.rollout_worker import RolloutWorker

    from ._worker_helpers import SPEC, _colocated_contexts, _multi_turn_disaggregated

    pre = RolloutWorker("p", "prefill", SPEC, transport="shared_memory")
    dec = RolloutWorker("d", "decode", SPEC, transport="shared_memory")
    assert pre.transport is not dec.transport

    async def prefill_call(w, req):
        return await w.prefill(req)

    async def decode_call(w, req, p):
        return await w.generate(req, p)

    try:
        got = asyncio.run(_multi_turn_disaggregated(pre, dec, prefill_call, decode_call, 3, 3))
        assert [ctx for ctx, _ in got] == _colocated_contexts(3, 3)
        sender = pre.transport
        assert sender._segments and not any(s.in_use for s in sender._segments)
        assert len(sender._segments) <= 3  # reused across the 9 turns (3 in flight at most)
    finally:
        dec.transport.close()
        pre.transport.close()


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.path.isdir("/proc"), reason="Linux")
def test_orphaned_segments_of_dead_processes_are_swept() -> None:
    dead, live = "/dev/shm/pearl-kv-999999999-0", f"/dev/shm/pearl-kv-{os.getpid()}-99999"
    for path in (dead, live):
        with open(path, "wb") as f:
            f.write(b"x")
    try:
        assert sweep_orphaned_segments() >= 1
        assert not os.path.exists(dead) and os.path.exists(live)
    finally:
        for path in (dead, live):
            if os.path.exists(path):
                os.unlink(path)


class _Side:
    """One end of the transport in its own process (a Ray actor)."""

    def __init__(self) -> None:
        self.transport = SharedMemoryTransport()

    def send(self, seed: int):
        return self.transport.send(_payload(6, seed=seed), request_id=f"r{seed}", num_tokens=6)

    def receive_and_release(self, handle) -> bool:
        got = self.transport.receive(handle)
        same = torch.equal(got.k, _payload(6, seed=int(handle.request_id[1:])).k)
        self.transport.release(handle)
        return same

    def in_use(self) -> list[bool]:
        return [s.in_use for s in self.transport._segments]


@pytest.mark.ray
def test_between_two_actor_processes_on_one_node() -> None:
    """A segment written by one process is read by another and freed by its release."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, address="local", logging_level="ERROR")
    try:
        side = ray.remote(_Side)
        sender, receiver = side.remote(), side.remote()
        for seed in range(3):
            handle = ray.get(sender.send.remote(seed))
            assert ray.get(sender.in_use.remote()) == [True]
            assert ray.get(receiver.receive_and_release.remote(handle))
            assert ray.get(sender.in_use.remote()) == [False]  # freed by the other process
    finally:
        ray.shutdown()
        sweep_orphaned_segments(wait_s=2.0)  # the killed sender's segment

"""Same-node KV transfer through a pool of reused shared-memory segments.

Ray's object store charges a fixed cost per object (store IPC to create and seal, a fresh
page's fault on first touch) that is as large as copying a few MiB on a small machine
(BENCHMARKS.md, KV transfer). `SharedMemoryTransport` removes it for a prefill worker and
a decode worker on the same node: the sender keeps a pool of POSIX shared-memory segments,
touched once when created, and copies each payload's tensors into a free one (the only
copy); the handle names the segment; the receiver maps it (once per segment, then cached)
and gets zero-copy tensor views, which the engine's `import_kv` copies into its paged
blocks. The receiver then `release`s the handle, which marks the segment free for the
sender's next payload (a flag in the segment's header: no message goes back).

Safety: each use of a segment has a generation number (header and handle). A payload
never released (its turn was cancelled, the receiver died) is reclaimed once it is older
than `stale_after_s` and its generation bumped, so a receive that comes later fails with
`KVLostError` (the turn is re-prefilled) instead of reading another payload, and so does a
receive that finds the generation changed after it read. Segments belong to the sending
process: when it dies they are unlinked (Python's resource tracker) and receives fail the
same way, as with the object store's owner semantics. A process killed together with its
resource tracker leaves its segments in /dev/shm: the next transport created on the node
unlinks those whose creator is gone (`sweep_orphaned_segments`).

Scope: one machine (Ray nodes started on one machine share its shared memory). A receiver
on another machine gets `KVLostError` naming both; use the object-store transport
(`cluster.kv_transport: object_store`, the default) when prefill and decode workers can be
on different machines. Linux (or any system with POSIX shared memory under Python's
`multiprocessing.shared_memory`).
"""

from __future__ import annotations

import itertools
import os
import time
import weakref
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import numpy as np
import torch

from pearl.runtime.transport.kv_transfer import (
    KVHandle,
    KVLostError,
    _walk,
    payload_num_bytes,
    register_transport,
)

_HEADER = 64  # bytes: generation (int64), in use (int64), then padding
_ALIGN = 64
_MIN_SEGMENT = 1 << 20
_CREATED: set[str] = set()  # segments this process created (its resource tracker's)
_PREFIX = "pearl-kv-"  # + creator pid + "-" + sequence number
_SEQ = itertools.count()
_SHM_DIR = "/dev/shm"


def num_segments() -> int:
    """This transport's segments on this machine (any process's), where that can be seen."""
    try:
        return sum(1 for name in os.listdir(_SHM_DIR) if name.startswith(_PREFIX))
    except OSError:
        return 0


def sweep_orphaned_segments(wait_s: float = 0.0) -> int:
    """Unlink this transport's segments whose creating process is gone (a worker killed
    with its resource tracker leaves them behind in /dev/shm); returns how many. Every new
    transport runs it, so a node's leftovers go with the next worker started there.
    `wait_s`: keep sweeping that long while segments remain (processes just killed take a
    moment to be gone)."""
    swept = _sweep()
    deadline = time.monotonic() + wait_s
    while num_segments() and time.monotonic() < deadline:
        time.sleep(0.1)
        swept += _sweep()
    return swept


def _sweep() -> int:
    if not os.path.isdir("/proc"):  # no way to tell a live creator from a dead one
        return 0
    try:
        names = os.listdir(_SHM_DIR)
    except OSError:
        return 0
    swept = 0
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        pid = name[len(_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        try:
            os.unlink(os.path.join(_SHM_DIR, name))
            swept += 1
        except OSError:
            pass
    return swept


@dataclass(frozen=True, slots=True)
class _ShmTensor:
    """Where one tensor of a payload lies in the segment."""

    offset: int
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class _ShmRef:
    """The transport-specific part of a `KVHandle`."""

    node_id: str
    segment: str
    generation: int
    payload: Any  # the payload with every tensor replaced by a `_ShmTensor`


class _Segment:
    def __init__(self, size: int) -> None:
        room = _shm_room()
        if room is not None and size > room:  # writing past tmpfs's room is a SIGBUS
            raise KVLostError(
                f"no room for a {size / 2**20:.0f} MiB KV segment in /dev/shm "
                f"({room / 2**20:.0f} MiB free)"
            )
        self.shm = shared_memory.SharedMemory(
            create=True, size=size, name=f"{_PREFIX}{os.getpid()}-{next(_SEQ)}"
        )
        _CREATED.add(self.shm.name)
        self.size = size
        np.frombuffer(_buf(self.shm), dtype=np.uint8)[:] = 0  # touch every page once, now
        self.header = np.frombuffer(_buf(self.shm), dtype=np.int64, count=2)
        self.sent_at = 0.0

    @property
    def in_use(self) -> bool:
        return bool(self.header[1])


def _shm_room() -> int | None:
    """Bytes free where POSIX shared memory lives (Linux: /dev/shm), if known."""
    try:
        st = os.statvfs("/dev/shm")
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def _node_id() -> str:
    """The machine (and boot) whose /dev/shm this process sees: Ray nodes started on one
    machine (a local multi-node cluster) share it, other machines do not."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{os.uname().nodename}:{boot}"


@register_transport
class SharedMemoryTransport:
    """KV between processes on one machine through reused shared-memory segments (see the
    module docstring). `max_pool_bytes` bounds the sender's segments; past it, the oldest
    payload not released within `stale_after_s` is reclaimed, else `send` raises
    `KVLostError` (the caller re-prefills or uses the object store)."""

    name = "shared_memory"

    def __init__(self, *, max_pool_bytes: int = 4 << 30, stale_after_s: float = 120.0) -> None:
        self.max_pool_bytes = max_pool_bytes
        self.stale_after_s = stale_after_s
        self._segments: list[_Segment] = []
        self._mapped: dict[str, shared_memory.SharedMemory] = {}
        self._generations = itertools.count(1)
        self._node = _node_id()
        sweep_orphaned_segments()
        # at exit or when dropped (a finaliser, unlike atexit, keeps no transport alive)
        weakref.finalize(self, _close, self._mapped, self._segments)

    # -- sender ---------------------------------------------------------------------------
    def send(self, payload: Any, *, request_id: str = "", num_tokens: int = 0) -> KVHandle:
        tensors: list[torch.Tensor] = []

        def collect(t: torch.Tensor) -> torch.Tensor:
            tensors.append(t)
            return t

        _walk(payload, torch.Tensor, collect)
        need = _HEADER + sum(_aligned(t.numel() * t.element_size()) for t in tensors)
        seg = self._acquire(need)
        generation = next(self._generations)
        offset = _HEADER

        def place(t: torch.Tensor) -> _ShmTensor:
            nonlocal offset
            src = t.detach().contiguous()
            if src.device.type != "cpu":
                src = src.cpu()
            nbytes = src.numel() * src.element_size()
            if nbytes:
                dst = torch.frombuffer(
                    _buf(seg.shm), dtype=torch.uint8, count=nbytes, offset=offset
                )
                dst.copy_(src.reshape(-1).view(torch.uint8))
            placed = _ShmTensor(offset, tuple(src.shape), str(src.dtype).removeprefix("torch."))
            offset += _aligned(nbytes)
            return placed

        encoded = _walk(payload, torch.Tensor, place)
        seg.header[0], seg.header[1] = generation, 1
        seg.sent_at = time.monotonic()
        ref = _ShmRef(self._node, seg.shm.name, generation, encoded)
        return KVHandle(self.name, request_id, ref, payload_num_bytes(payload), num_tokens)

    def _acquire(self, need: int) -> _Segment:
        free = [s for s in self._segments if not s.in_use and s.size >= need]
        if free:
            return min(free, key=lambda s: s.size)
        pooled = sum(s.size for s in self._segments)
        size = max(_MIN_SEGMENT, -(-need // _MIN_SEGMENT) * _MIN_SEGMENT)
        if pooled + size > self.max_pool_bytes:
            now = time.monotonic()
            stale = [
                s for s in self._segments if s.size >= need and now - s.sent_at > self.stale_after_s
            ]
            if stale:  # never released: the next receive of it sees a new generation
                return min(stale, key=lambda s: s.sent_at)
            raise KVLostError(
                f"shared-memory KV pool full ({pooled / 2**20:.0f} MiB of "
                f"{self.max_pool_bytes / 2**20:.0f} MiB in payloads not released yet)"
            )
        seg = _Segment(size)
        self._segments.append(seg)
        return seg

    # -- receiver -------------------------------------------------------------------------
    def receive(self, handle: KVHandle) -> Any:
        ref = self._ref(handle)
        shm = self._map(handle, ref)
        header = np.frombuffer(_buf(shm), dtype=np.int64, count=2)
        if int(header[0]) != ref.generation or not header[1]:
            raise KVLostError(f"KV of request '{handle.request_id}' was reclaimed by its sender")

        def view(t: _ShmTensor) -> torch.Tensor:
            dtype = getattr(torch, t.dtype)
            count = int(np.prod(t.shape, dtype=np.int64))
            if count == 0:
                return torch.empty(t.shape, dtype=dtype)
            return torch.frombuffer(_buf(shm), dtype=dtype, count=count, offset=t.offset).view(
                t.shape
            )

        return _walk(ref.payload, _ShmTensor, view)

    def check(self, handle: KVHandle) -> None:
        """Raise `KVLostError` if the segment was reused since `receive` (call it after
        copying the tensors out: their contents are then not this payload's)."""
        ref = self._ref(handle)
        shm = self._mapped.get(ref.segment)
        if (
            shm is None
            or int(np.frombuffer(_buf(shm), dtype=np.int64, count=1)[0]) != ref.generation
        ):
            raise KVLostError(f"KV of request '{handle.request_id}' changed while read")

    def release(self, handle: KVHandle) -> None:
        """The receiver is done with the tensors: the sender may reuse the segment."""
        ref = self._ref(handle)
        shm = self._mapped.get(ref.segment) or self._own(ref.segment)
        if shm is None:
            return
        header = np.frombuffer(_buf(shm), dtype=np.int64, count=2)
        if int(header[0]) == ref.generation:
            header[1] = 0

    def _ref(self, handle: KVHandle) -> _ShmRef:
        if handle.transport != self.name or not isinstance(handle.ref, _ShmRef):
            raise ValueError(f"handle from transport '{handle.transport}' given to '{self.name}'")
        return handle.ref

    def _own(self, name: str) -> shared_memory.SharedMemory | None:
        return next((s.shm for s in self._segments if s.shm.name == name), None)

    def _map(self, handle: KVHandle, ref: _ShmRef) -> shared_memory.SharedMemory:
        if ref.node_id != self._node:
            raise KVLostError(
                f"KV of request '{handle.request_id}' is in shared memory on machine "
                f"{ref.node_id}, not on this one ({self._node}): the shared-memory transport "
                "is for one machine; use the object store across machines"
            )
        shm = self._mapped.get(ref.segment) or self._own(ref.segment)
        if shm is None:
            try:
                shm = shared_memory.SharedMemory(name=ref.segment)
            except FileNotFoundError:
                raise KVLostError(
                    f"KV of request '{handle.request_id}' is gone (its sender exited)"
                ) from None
            # Attaching registers the segment with this process's resource tracker, which
            # would unlink it when this process exits: it is the sender's to unlink.
            if ref.segment not in _CREATED:
                try:
                    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
                except Exception:  # noqa: BLE001 - a tracker without it: nothing to undo
                    pass
            self._mapped[ref.segment] = shm
        return shm

    # -- lifetime -------------------------------------------------------------------------
    @property
    def pool_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def close(self) -> None:
        """Unmap everything; unlink the segments this process created."""
        _close(self._mapped, self._segments)


def _close(mapped: dict[str, shared_memory.SharedMemory], segments: list[_Segment]) -> None:
    for shm in mapped.values():
        _quietly(shm.close)
    mapped.clear()
    for seg in segments:
        del seg.header
        _quietly(seg.shm.close)
        _quietly(seg.shm.unlink)
    segments.clear()


def _buf(shm: shared_memory.SharedMemory) -> memoryview:
    """The segment's mapping (None only once closed, which a live transport never reads)."""
    buf = shm.buf
    if buf is None:
        raise KVLostError(f"shared-memory segment {shm.name} is closed")
    return buf


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _quietly(fn: Any) -> None:
    try:
        fn()
    except (OSError, BufferError):
        pass

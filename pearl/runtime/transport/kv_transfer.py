"""KV-cache transfer between prefill and decode workers behind a small transport interface.

A prefill worker calls `transport.send(payload)` and gets a `KVHandle` (small, picklable,
safe to route through the driver); the decode worker calls `transport.receive(handle)` and
gets the payload back. What a payload is belongs to the engine (`KVPayload`: token ids plus
per-layer K/V tensors); the transport only moves it.

`ObjectStoreTransport` (the default) moves payloads through Ray's object store. Torch
tensors are turned into numpy arrays before `ray.put`, because Ray stores numpy buffers
out of band and `ray.get` maps them read-only from shared memory without a copy (zero-copy
on the same node; one network copy across nodes). The receiver wraps those buffers back
into torch tensors without copying; the engine copies them once into its paged KV blocks.
The object is owned by the sender: it lives until the handle's last reference is dropped,
or until the sending worker dies (then `receive` raises `KVLostError` and the request is
re-prefilled elsewhere; on the sender's node Ray drops a dead owner's objects
asynchronously, so a receive right after the death may still succeed).

Cost (bench/kv_transfer.py): the `ray.put` copy is the only copy; besides it Ray charges
a fixed ~1-3 ms per object (store IPC, serialisation of the small rest), and a process
pays a page fault per 4 KiB store page it touches for the first time (about 2,300 for
9 MiB: more than the copy itself), plus the kernel's zero-fill where no process has
written the page yet. Ray recycles freed store memory, so a long-running sender stops
paying them once it has touched its working set; `RAY_preallocate_plasma_memory=1` on the
raylets and `map_object_store_pages()` in the worker pay them up front.

`InProcessTransport` keeps payloads in a dict: for tests and single-process runs. Room is
left for device-to-device transports (NCCL, NIXL) on GPU clusters: anything that implements
`send` / `receive` / `release` with the same handle type fits (paper §5: the KV-transfer
metadata is refreshed when a worker restores its device state).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

__all__ = [
    "InProcessTransport",
    "KVHandle",
    "KVLostError",
    "ObjectStoreTransport",
    "Transport",
    "decode_tensors",
    "encode_tensors",
    "map_object_store_pages",
    "payload_num_bytes",
    "register_transport",
    "registered_transports",
]


class KVLostError(RuntimeError):
    """The KV behind a handle is gone (sender died, or the handle was released)."""


@dataclass(frozen=True, slots=True)
class KVHandle:
    """A reference to one request's transferred KV.

    `ref` is transport-specific: a one-element tuple holding a Ray `ObjectRef` for the
    object-store transport (a ref nested in a container is passed as a reference, not
    resolved by Ray when it is an actor-call argument), a key for the in-process transport.
    """

    transport: str
    request_id: str
    ref: Any
    num_bytes: int
    num_tokens: int


class Transport(Protocol):
    """Moves one KV payload from a sender to a receiver."""

    name: str

    def send(self, payload: Any, *, request_id: str = "", num_tokens: int = 0) -> KVHandle: ...

    def receive(self, handle: KVHandle) -> Any: ...

    def release(self, handle: KVHandle) -> None: ...


# -- tensor codec: torch tensors <-> numpy arrays (Ray stores numpy out of band) -----------


@dataclass(frozen=True, slots=True)
class _Tensor:
    """A torch tensor flattened to a numpy buffer; `dtype` is the torch dtype's name."""

    array: np.ndarray
    dtype: str


_NO_NUMPY = {torch.bfloat16: torch.int16}  # torch dtypes numpy lacks: ship their bits


def encode_tensors(obj: Any) -> Any:
    """Replace every CPU/GPU torch tensor inside `obj` by a numpy-backed `_Tensor`.

    Walks dataclasses, dicts, lists and tuples; other values are returned as they are, and
    so is every container holding no tensor (no rebuild: a KV payload's token-id tuple is
    not walked element by element). Tensors are moved to CPU (a copy for device tensors, a
    view for CPU tensors).
    """
    return _walk(obj, torch.Tensor, _encode_tensor)


def decode_tensors(obj: Any) -> Any:
    """Inverse of `encode_tensors`; tensors share memory with the (maybe read-only) buffers."""
    return _walk(obj, _Tensor, _decode_tensor)


def payload_num_bytes(obj: Any) -> int:
    """Bytes of tensor data in `obj` (torch tensors, numpy arrays, encoded tensors)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, _Tensor):
        return int(obj.array.nbytes)
    if type(obj) in _SCALARS:
        return 0
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(payload_num_bytes(getattr(obj, name)) for name in _field_names(type(obj)))
    if isinstance(obj, dict):
        return sum(payload_num_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return 0 if _all_scalars(obj) else sum(payload_num_bytes(v) for v in obj)
    return 0


def _encode_tensor(obj: torch.Tensor) -> _Tensor:
    t = obj.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    bits = _NO_NUMPY.get(t.dtype)
    arr = (t.view(bits) if bits is not None else t).numpy()
    return _Tensor(arr, str(t.dtype).removeprefix("torch."))


def _decode_tensor(obj: _Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only buffers: we never write
        t = torch.from_numpy(obj.array)
    dtype = getattr(torch, obj.dtype)
    return t.view(dtype) if dtype in _NO_NUMPY else t


_SCALARS = frozenset({int, float, str, bytes, bool, type(None)})


def _all_scalars(seq: list | tuple) -> bool:
    return all(type(x) in _SCALARS for x in seq)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _walk(obj: Any, leaf: type, convert: Callable[[Any], Any]) -> Any:
    """`obj` with every instance of `leaf` replaced by `convert(leaf)`; a container with
    nothing to replace is returned itself (identity), so unchanged parts are not copied."""
    if isinstance(obj, leaf):
        return convert(obj)
    if type(obj) in _SCALARS:
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for name in _field_names(type(obj)):
            old = getattr(obj, name)
            new = _walk(old, leaf, convert)
            if new is not old:
                changes[name] = new
        return _rebuild(obj, changes) if changes else obj
    if isinstance(obj, dict):
        walked = {k: _walk(v, leaf, convert) for k, v in obj.items()}
        return walked if any(walked[k] is not v for k, v in obj.items()) else obj
    if isinstance(obj, (list, tuple)) and not _is_namedtuple(obj):
        if _all_scalars(obj):
            return obj
        items = [_walk(v, leaf, convert) for v in obj]
        return type(obj)(items) if any(a is not b for a, b in zip(items, obj, strict=True)) else obj
    return obj


def _rebuild(obj: Any, changes: dict[str, Any]) -> Any:
    init = {f.name for f in dataclasses.fields(obj) if f.init}
    new = dataclasses.replace(obj, **{k: v for k, v in changes.items() if k in init})
    for k, v in changes.items():  # non-init fields (rare): set directly
        if k not in init:
            object.__setattr__(new, k, v)
    return new


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


# -- object-store pages ------------------------------------------------------------------

_MADV_POPULATE_WRITE = 23  # Linux >= 5.14


def map_object_store_pages(*, max_bytes: int | None = None) -> int:
    """Map the existing pages of this node's Ray object store into this process; returns
    the number of pages mapped (0 where that is not possible).

    A process pays a page fault the first time it touches each 4 KiB page of the store's
    shared memory (a few microseconds each on a busy machine: more than copying the page),
    so a worker's first transfers are slower than its later ones, which reuse pages it has
    mapped. Calling this once (e.g. in a background thread after the worker's first
    transfer) pays that cost up front: one `madvise(MADV_POPULATE_WRITE)` per run of pages
    that exist already. It never allocates store memory (pages no process has written yet
    stay unmapped; `RAY_preallocate_plasma_memory=1` makes them all exist), and it costs
    page tables only (8 bytes per 4 KiB page). `max_bytes` caps it to the start of the
    store (where Ray allocates first). Linux only; the store's mapping appears after the
    process's first `ray.put` or `ray.get` of a large object.
    """
    import ctypes
    import mmap

    try:
        with open("/proc/self/maps") as f:
            lines = f.readlines()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    except (OSError, AttributeError):
        return 0
    page = mmap.PAGESIZE
    mapped = 0
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or "plasma" not in fields[5] or not fields[1].startswith("rw-s"):
            continue
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if max_bytes is not None:
            hi = min(hi, lo + max(0, max_bytes) // page * page)
        num_pages = (hi - lo) // page
        if num_pages == 0:
            continue
        resident = np.zeros(num_pages, dtype=np.uint8)
        if libc.mincore(lo, hi - lo, resident.ctypes.data) != 0:
            continue
        edges = np.flatnonzero(np.diff(np.concatenate(([0], resident & 1, [0]))))
        for start, end in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
            if libc.madvise(lo + start * page, (end - start) * page, _MADV_POPULATE_WRITE) != 0:
                return mapped  # kernel without MADV_POPULATE_WRITE, or the store went away
            mapped += end - start
    return mapped


# -- transports --------------------------------------------------------------------------


class ObjectStoreTransport:
    """KV through Ray's object store (default). Needs `ray.init` in the calling process."""

    name = "object_store"

    def send(self, payload: Any, *, request_id: str = "", num_tokens: int = 0) -> KVHandle:
        import ray

        encoded = encode_tensors(payload)
        ref = ray.put(encoded)
        return KVHandle(self.name, request_id, (ref,), payload_num_bytes(encoded), num_tokens)

    def receive(self, handle: KVHandle) -> Any:
        import ray

        _check_kind(handle, self.name)
        try:
            encoded = ray.get(handle.ref[0])
        except (ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError) as err:
            raise KVLostError(f"KV of request '{handle.request_id}' is lost: {err}") from err
        return decode_tensors(encoded)

    def release(self, handle: KVHandle) -> None:
        """Drop this process's reference; the object goes once no one holds the handle."""
        _check_kind(handle, self.name)


class InProcessTransport:
    """KV kept in a dict in this process: for tests and single-process use."""

    name = "in_process"

    def __init__(self) -> None:
        self._store: dict[int, Any] = {}
        self._keys = itertools.count()

    def send(self, payload: Any, *, request_id: str = "", num_tokens: int = 0) -> KVHandle:
        key = next(self._keys)
        self._store[key] = payload
        return KVHandle(self.name, request_id, key, payload_num_bytes(payload), num_tokens)

    def receive(self, handle: KVHandle) -> Any:
        _check_kind(handle, self.name)
        try:
            return self._store[handle.ref]
        except KeyError:
            raise KVLostError(f"KV of request '{handle.request_id}' was released") from None

    def release(self, handle: KVHandle) -> None:
        _check_kind(handle, self.name)
        self._store.pop(handle.ref, None)

    def __len__(self) -> int:
        return len(self._store)


_TRANSPORTS: dict[str, type] = {
    ObjectStoreTransport.name: ObjectStoreTransport,
    InProcessTransport.name: InProcessTransport,
}


def register_transport(cls: type) -> type:
    """Make a transport class (with a `name` attribute) available to `pearl.runtime.transport.by_name.get_transport`, e.g.
    a device-to-device one (NCCL, NIXL) on GPU clusters. Usable as a class decorator."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError("a transport class needs a non-empty string attribute 'name'")
    for method in ("send", "receive", "release"):
        if not callable(getattr(cls, method, None)):
            raise ValueError(f"transport '{name}' lacks a '{method}' method")
    _TRANSPORTS[name] = cls
    return cls


def registered_transports() -> dict[str, type]:
    """The transport classes registered so far, by name (see `pearl.runtime.transport.by_name`)."""
    return dict(_TRANSPORTS)


def _check_kind(handle: KVHandle, name: str) -> None:
    if handle.transport != name:
        raise ValueError(f"handle from transport '{handle.transport}' given to '{name}'")

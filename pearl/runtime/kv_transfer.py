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
re-prefilled elsewhere).

`InProcessTransport` keeps payloads in a dict: for tests and single-process runs. Room is
left for device-to-device transports (NCCL, NIXL) on GPU clusters: anything that implements
`send` / `receive` / `release` with the same handle type fits (paper §5: the KV-transfer
metadata is refreshed when a worker restores its device state).
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings
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
    "get_transport",
    "payload_num_bytes",
    "register_transport",
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

    Walks dataclasses, dicts, lists and tuples; other values are returned as they are.
    Tensors are moved to CPU (a copy for device tensors, a view for CPU tensors).
    """
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        bits = _NO_NUMPY.get(t.dtype)
        arr = (t.view(bits) if bits is not None else t).numpy()
        return _Tensor(arr, str(t.dtype).removeprefix("torch."))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: encode_tensors(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return _rebuild(obj, changes)
    if isinstance(obj, dict):
        return {k: encode_tensors(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(encode_tensors(v) for v in obj) if not _is_namedtuple(obj) else obj
    return obj


def decode_tensors(obj: Any) -> Any:
    """Inverse of `encode_tensors`; tensors share memory with the (maybe read-only) buffers."""
    if isinstance(obj, _Tensor):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # read-only buffers: we never write
            t = torch.from_numpy(obj.array)
        dtype = getattr(torch, obj.dtype)
        return t.view(dtype) if dtype in _NO_NUMPY else t
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: decode_tensors(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return _rebuild(obj, changes)
    if isinstance(obj, dict):
        return {k: decode_tensors(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(decode_tensors(v) for v in obj) if not _is_namedtuple(obj) else obj
    return obj


def payload_num_bytes(obj: Any) -> int:
    """Bytes of tensor data in `obj` (torch tensors, numpy arrays, encoded tensors)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, _Tensor):
        return int(obj.array.nbytes)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(payload_num_bytes(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    if isinstance(obj, dict):
        return sum(payload_num_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(payload_num_bytes(v) for v in obj)
    return 0


def _rebuild(obj: Any, changes: dict[str, Any]) -> Any:
    init = {f.name for f in dataclasses.fields(obj) if f.init}
    new = dataclasses.replace(obj, **{k: v for k, v in changes.items() if k in init})
    for k, v in changes.items():  # non-init fields (rare): set directly
        if k not in init:
            object.__setattr__(new, k, v)
    return new


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


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
    """Make a transport class (with a `name` attribute) available to `get_transport`, e.g.
    a device-to-device one (NCCL, NIXL) on GPU clusters. Usable as a class decorator."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError("a transport class needs a non-empty string attribute 'name'")
    for method in ("send", "receive", "release"):
        if not callable(getattr(cls, method, None)):
            raise ValueError(f"transport '{name}' lacks a '{method}' method")
    _TRANSPORTS[name] = cls
    return cls


def get_transport(name: str) -> Transport:
    """A transport by name (`object_store`, `in_process`)."""
    try:
        return _TRANSPORTS[name]()
    except KeyError:
        known = ", ".join(sorted(_TRANSPORTS))
        raise ValueError(f"unknown KV transport '{name}' (known: {known})") from None


def _check_kind(handle: KVHandle, name: str) -> None:
    if handle.transport != name:
        raise ValueError(f"handle from transport '{handle.transport}' given to '{name}'")

"""PEARL's KV connector for vLLM: a turn's KV out of one vLLM engine and into another.

vLLM moves KV between instances through a *KV connector* (its `KVConnectorBase_V1`): the
scheduler side decides, per request, how many prompt tokens come from outside and which
blocks they go to; the worker side fills those blocks before the forward pass. This
connector moves no bytes between processes itself: it turns a finished prefill into
PEARL's `KVPayload`, which the rollout worker sends through PEARL's own transports (object
store, shared memory) as it sends our engine's, and on the decode side it copies an
imported payload into the blocks vLLM allocated. So a vLLM prefill worker hands a turn to
a vLLM decode worker, and any worker takes either role on any request
(`role_change: per_request`), with no restart.

How, with the engine in the worker's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`):

* each `VllmEngine` opens a `KVStore` under a key and names it in the connector's extra
  config; vLLM builds the connector twice (scheduler and worker role), both find the store;
* the worker role registers the paged KV caches (`register_kv_caches`);
* **export**: a prefill-only request carries `{"pearl_export": id}` in its KV-transfer
  params and runs with `max_tokens=1`. When it finishes, before vLLM frees its blocks
  (`request_finished`), the blocks holding the prompt are copied into the store;
  `VllmEngine.export_kv` takes them from there;
* **import**: `VllmEngine.import_kv` puts the payload in the store and adds the request
  (prompt plus the tokens already generated) with `{"pearl_import": id}`;
  `get_num_new_matched_tokens` reports the payload's tokens beyond any local prefix-cache
  hit (whole blocks), `update_state_after_alloc` records the blocks vLLM allocated for them,
  and `start_load_kv` copies them in before the step's forward pass. vLLM computes the
  last token (the one sampled on the prefill side, which has no KV yet) and decodes on.

The payload holds vLLM's blocks as they are (one tensor per layer, along the cache's
block dimension), not tokens: the in-block layout belongs to the attention kernel (the
CPU kernel keeps K transposed, by instruction set), so only vLLM's own kernels interpret
it. The payload's `layout` tag (`layout_of`) names the kernel's platform and instruction
set, the block shape and the dtype; an engine refuses a payload whose tag differs from its
own, and PEARL's engine refuses vLLM blocks (and the other way round).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from vllm.v1.request import Request

EXPORT, IMPORT = "pearl_export", "pearl_import"
STORE_KEY = "pearl_store"


@dataclass
class _Load:
    """Copy payload blocks `first..` of request `rid` into `block_ids` (the request's blocks
    from its first block not already in the local prefix cache)."""

    rid: str
    block_ids: list[int]
    first: int


@dataclass
class KVStore:
    """What one engine's connector pair shares: the paged caches, gathered exports, payloads
    waiting to be loaded, and the loads planned for the next forward pass."""

    block_size: int = 0
    num_blocks: int = 0
    layout: str = ""  # the payload layout tag of this engine's paged cache (`layout_of`)
    caches: list[torch.Tensor] = field(default_factory=list)  # by layer index
    block_dims: list[int] = field(default_factory=list)  # the block dimension of each
    exports: dict[str, tuple[int, list[torch.Tensor]]] = field(default_factory=dict)
    imports: dict[str, tuple[int, list[torch.Tensor]]] = field(default_factory=dict)
    match_start: dict[str, int] = field(default_factory=dict)
    planned: list[_Load] = field(default_factory=list)


_STORES: dict[str, KVStore] = {}
_LOCK = threading.Lock()


_BUILDING: str | None = None  # the store of the engine being built (`building`)


@contextlib.contextmanager
def building(key: str) -> Iterator[KVStore]:
    """Build one vLLM engine inside this: its paged caches go to store `key`. Builds in one
    process are serialised."""
    global _BUILDING
    with _BUILD_LOCK:
        _BUILDING = key
        try:
            yield open_store(key)
        finally:
            _BUILDING = None


_BUILD_LOCK = threading.Lock()


def open_store(key: str) -> KVStore:
    with _LOCK:
        return _STORES.setdefault(key, KVStore())


def close_store(key: str) -> None:
    with _LOCK:
        _STORES.pop(key, None)


def _layer_index(name: str) -> int:
    """`model.layers.12.self_attn.attn` -> 12."""
    parts = name.split(".")
    for a, b in zip(parts, parts[1:], strict=False):
        if a == "layers" and b.isdigit():
            return int(b)
    raise ValueError(f"cannot tell the layer index of KV cache {name!r}")


def _block_dim(cache: torch.Tensor, num_blocks: int) -> int:
    dims = [i for i, n in enumerate(cache.shape) if n == num_blocks]
    if not dims:
        raise ValueError(f"no block dimension of size {num_blocks} in {tuple(cache.shape)}")
    return dims[0]


def layout_of(backend: str, cache: torch.Tensor, block_dim: int, block_size: int) -> str:
    """A tag two engines must share to exchange raw blocks: the attention backend (with the
    CPU's instruction set, which fixes the CPU kernel's K layout), the block's shape and
    the dtype."""
    shape = [n for i, n in enumerate(cache.shape) if i != block_dim]
    isa = torch.backends.cpu.get_cpu_capability() if cache.device.type == "cpu" else ""
    return f"vllm:{backend}:{isa}:bs{block_size}:{shape}@{block_dim}:{cache.dtype}"


def gather(store: KVStore, block_ids: list[int], n: int) -> list[torch.Tensor]:
    """The raw blocks holding the first `n` tokens, one CPU tensor per layer."""
    nb = -(-n // store.block_size)
    out = []
    for cache, dim in zip(store.caches, store.block_dims, strict=True):
        idx = torch.tensor(block_ids[:nb], dtype=torch.long, device=cache.device)
        out.append(cache.index_select(dim, idx).to("cpu", copy=True))
    return out


def scatter(store: KVStore, load: _Load, blocks: list[torch.Tensor]) -> None:
    """Copy payload blocks `load.first..` into the request's blocks, layer by layer."""
    for cache, dim, src in zip(store.caches, store.block_dims, blocks, strict=True):
        n = src.shape[dim] - load.first
        dst = torch.tensor(load.block_ids[load.first : load.first + n], dtype=torch.long)
        part = src.narrow(dim, load.first, n).to(cache.device, cache.dtype)
        cache.index_copy_(dim, dst.to(cache.device), part)


def _params(request: Request) -> dict[str, Any]:
    return request.kv_transfer_params or {}


_CONNECTOR: type | None = None


def __getattr__(name: str) -> Any:
    """`PearlKVConnector`, the class vLLM loads by name (`kv_connector_module_path`); built
    on first use, since vLLM is an optional dependency."""
    global _CONNECTOR
    if name != "PearlKVConnector":
        raise AttributeError(name)
    if _CONNECTOR is None:
        _CONNECTOR = _build_connector_class()
    return _CONNECTOR


def _build_connector_class() -> type:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1,
        KVConnectorMetadata,
        KVConnectorRole,
    )

    @dataclass
    class _Meta(KVConnectorMetadata):
        key: str = ""
        loads: list[_Load] = field(default_factory=list)

    class PearlKVConnector(KVConnectorBase_V1):
        """See the module docstring. vLLM keeps one worker-role connector per process (a
        global) for every engine in it, so the worker role finds its store per call: the
        caches through `building`, the loads through the step's metadata."""

        def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
            super().__init__(vllm_config, role, kv_cache_config)
            extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
            self.key = str(extra[STORE_KEY])
            if kv_cache_config is not None and role == KVConnectorRole.SCHEDULER:
                # the engine's caches are registered by now (the scheduler comes last)
                st = self.store
                st.block_size = int(vllm_config.cache_config.block_size)
                st.num_blocks = int(kv_cache_config.num_blocks)
                st.block_dims = [_block_dim(t, st.num_blocks) for t in st.caches]
                if st.caches:
                    from vllm.platforms import current_platform

                    platform = str(current_platform.device_type)
                    st.layout = layout_of(platform, st.caches[0], st.block_dims[0], st.block_size)

        @property
        def store(self) -> KVStore:
            return open_store(self.key)

        # -- worker side ----------------------------------------------------------------
        def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
            if _BUILDING is None:
                raise RuntimeError("PearlKVConnector: caches registered outside building()")
            named = sorted(kv_caches.items(), key=lambda kv: _layer_index(kv[0]))
            open_store(_BUILDING).caches = [t for _, t in named]

        def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
            meta = self._get_connector_metadata()
            loads: list[_Load] = getattr(meta, "loads", [])
            if not loads:
                return
            store = open_store(getattr(meta, "key", ""))
            for load in loads:
                kv = store.imports.pop(load.rid, None)
                if kv is not None:
                    scatter(store, load, kv[1])

        def wait_for_layer_load(self, layer_name: str) -> None:
            return None  # loads are synchronous (start_load_kv)

        def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kw: Any):
            return None  # exports are gathered when the request finishes

        def wait_for_save(self) -> None:
            return None

        # -- scheduler side -------------------------------------------------------------
        def get_num_new_matched_tokens(
            self, request: Request, num_computed_tokens: int
        ) -> tuple[int | None, bool]:
            rid = _params(request).get(IMPORT)
            kv = self.store.imports.get(rid) if rid is not None else None
            if rid is None or kv is None:
                return 0, False
            self.store.match_start[rid] = num_computed_tokens
            return max(0, kv[0] - num_computed_tokens), False

        def update_state_after_alloc(
            self, request: Request, blocks: Any, num_external_tokens: int
        ) -> None:
            rid = _params(request).get(IMPORT)
            if rid is None or not num_external_tokens:
                return
            start = self.store.match_start.pop(rid, 0)  # a local prefix hit: whole blocks
            block_ids = list(blocks.get_block_ids()[0])
            first = start // self.store.block_size
            self.store.planned.append(_Load(rid, block_ids, first))

        def build_connector_meta(self, scheduler_output: Any) -> Any:
            store = self.store
            meta = _Meta(key=self.key, loads=store.planned)
            store.planned = []
            return meta

        def request_finished(
            self, request: Request, block_ids: list[int]
        ) -> tuple[bool, dict[str, Any] | None]:
            params = _params(request)
            rid = params.get(EXPORT)
            if IMPORT in params:
                self.store.imports.pop(params[IMPORT], None)  # never loaded (aborted early)
            if rid is not None and request.num_computed_tokens > 0:
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                n = min(request.num_computed_tokens, request.num_prompt_tokens)
                self.store.exports[rid] = (n, gather(self.store, list(block_ids), n))
            return False, None

    return PearlKVConnector

"""A small KV-shaped payload shared by the transport tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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

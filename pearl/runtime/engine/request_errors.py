"""Errors the engine raises for requests it refuses or calls it cannot serve.

Checkpoint and config problems raise `pearl.errors.InputError` (file, tensor, field named);
the two classes here are for the request path, so a worker can turn them into an error
reply instead of dying.
"""

from __future__ import annotations

from collections.abc import Container


class RequestRejected(ValueError):
    """A request the engine will not run; `reason` is a short machine-readable code.

    Codes: "context_limit" (prompt + max_new_tokens exceed the context limit),
    "kv_capacity" (the sequence could never fit in the KV cache), "empty_prompt",
    "bad_token" (an id outside the vocabulary), "duplicate_id", "unknown_id",
    "incompatible_kv" (an imported KV payload from another model shape).
    """

    def __init__(self, request_id: str, reason: str, message: str) -> None:
        self.request_id = request_id
        self.reason = reason
        self.message = message
        super().__init__(f"request {request_id!r} rejected ({reason}): {message}")


class EngineReleased(RuntimeError):
    """The engine's device state was released; call `restore()` before using it."""


def check_request(
    request_id: str,
    prompt: list[int],
    max_new_tokens: int,
    *,
    live: Container[str],
    vocab_size: int,
    max_model_len: int,
) -> None:
    """The refusals every engine backend shares: a live id, an empty prompt, a token
    outside the vocabulary, prompt + max_new_tokens over the context limit."""
    if request_id in live:
        raise RequestRejected(request_id, "duplicate_id", "a request with this id is live")
    if not prompt:
        raise RequestRejected(request_id, "empty_prompt", "the prompt has no tokens")
    bad = [t for t in prompt if not 0 <= t < vocab_size]
    if bad:
        raise RequestRejected(
            request_id, "bad_token", f"token id {bad[0]} outside vocabulary [0, {vocab_size})"
        )
    total = len(prompt) + max_new_tokens
    if total > max_model_len:
        raise RequestRejected(
            request_id,
            "context_limit",
            f"prompt of {len(prompt)} tokens + max_new_tokens {max_new_tokens} = "
            f"{total} exceeds the context limit of {max_model_len} tokens",
        )


def check_payload(
    request_id: str,
    payload_signature: tuple[int, ...],
    payload_layout: str,
    *,
    signature: tuple[int, ...],
    layout: str,
) -> None:
    """The refusal every backend shares for imported KV: another model's, or KV kept in
    another layout (`KVPayload.layout`)."""
    if payload_signature != signature:
        raise RequestRejected(
            request_id,
            "incompatible_kv",
            f"payload model {payload_signature} != engine {signature}",
        )
    if payload_layout != layout:
        raise RequestRejected(
            request_id,
            "incompatible_kv",
            f"payload layout {payload_layout!r} != this engine's {layout!r}",
        )

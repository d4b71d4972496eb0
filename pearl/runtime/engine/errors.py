"""Errors the engine raises for requests it refuses or calls it cannot serve.

Checkpoint and config problems raise `pearl.errors.InputError` (file, tensor, field named);
the two classes here are for the request path, so a worker can turn them into an error
reply instead of dying.
"""

from __future__ import annotations


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

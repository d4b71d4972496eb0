"""KV transports by name: the built-in ones (`object_store`, `in_process` in
`pearl.runtime.transport.kv_transfer`, `shared_memory` in `pearl.runtime.transport.shm`) and any
registered with `register_transport`."""

from __future__ import annotations

import pearl.runtime.transport.shm  # noqa: F401 - registers the shared-memory transport
from pearl.runtime.transport.kv_transfer import Transport, registered_transports


def get_transport(name: str) -> Transport:
    """A transport by name (`object_store`, `in_process`, `shared_memory`, or registered)."""
    known = registered_transports()
    try:
        return known[name]()
    except KeyError:
        raise ValueError(
            f"unknown KV transport '{name}' (known: {', '.join(sorted(known))})"
        ) from None

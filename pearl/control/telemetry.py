"""Request telemetry: one schema for the simulator and the real runtime (paper §4.1.1, §5).

Two record kinds, written one JSON object per line (JSONL) with a `"kind"` key:

* `TurnRecord` (`"kind": "turn"`): one request turn of one trajectory: who served it, how
  many tokens it prefilled (new vs. served from the prefix cache) and decoded, and the
  timestamps of queueing, prefill, KV transfer, decode and the environment step that
  followed it.
* `WorkerStepRecord` (`"kind": "worker_step"`): one engine iteration of one worker (or a
  sample of them): batch size, tokens processed and the iteration's wall time.

The file format (JSON lines, an optional `"kind": "meta"` header naming the model and
GPU) is `pearl.control.telemetry_jsonl`. Field-by-field documentation:
docs/telemetry.md. Times are seconds on one clock per run (any origin).

Errors raised here are `TelemetryError` (a `ValueError`) carrying `source`, `location`
("line 12") and `field`, so an edge can turn them into one-line user errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any


class TelemetryError(ValueError):
    """A bad telemetry record: names the source, the location and the field."""

    def __init__(
        self, source: str, message: str, *, location: str | None = None, field: str | None = None
    ) -> None:
        self.source = source
        self.location = location
        self.field = field
        self.message = message
        where = source if location is None else f"{source}:{location}"
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")


_ROLES = ("colocated", "prefill", "decode")


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One request turn (paper §4.1.1: request telemetry feeds the runtime tracker).

    Token counts are non-negative. `context_tokens` is the trajectory's context when the
    turn's prefill starts (cached prefix + new prefill tokens). Timestamps are ordered
    `t_queued_s <= t_prefill_start_s <= t_prefill_end_s <= t_decode_start_s <=
    t_decode_end_s <= t_env_start_s <= t_env_end_s`; the KV-transfer pair is `None` when no
    transfer happened (colocated), the environment pair is `None` after a trajectory's last
    turn. `interrupted` marks a turn cut short by a reclaim or a return of borrowed GPUs;
    `resumed` a turn that restarted elsewhere with a full prefill of its context.
    """

    traj_id: str
    turn: int
    step: int
    weight_version: int
    prefill_worker: str
    decode_worker: str | None
    roles: tuple[str, ...]
    new_prefill_tokens: int
    cached_prefix_tokens: int
    decode_tokens: int
    context_tokens: int
    t_queued_s: float
    t_prefill_start_s: float
    t_prefill_end_s: float
    t_kv_start_s: float | None
    t_kv_end_s: float | None
    t_decode_start_s: float
    t_decode_end_s: float
    t_env_start_s: float | None
    t_env_end_s: float | None
    interrupted: bool = False
    resumed: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "roles", tuple(self.roles))
        _check_record(self)

    @property
    def prefill_s(self) -> float:
        return self.t_prefill_end_s - self.t_prefill_start_s

    @property
    def kv_s(self) -> float | None:
        if self.t_kv_start_s is None or self.t_kv_end_s is None:
            return None
        return self.t_kv_end_s - self.t_kv_start_s

    @property
    def decode_s(self) -> float:
        return self.t_decode_end_s - self.t_decode_start_s

    @property
    def env_s(self) -> float | None:
        if self.t_env_start_s is None or self.t_env_end_s is None:
            return None
        return self.t_env_end_s - self.t_env_start_s

    @property
    def t_end_s(self) -> float:
        """When the turn (including its environment step, if any) is over."""
        return self.t_env_end_s if self.t_env_end_s is not None else self.t_decode_end_s

    def to_json(self) -> dict[str, Any]:
        doc = {"kind": "turn", **asdict(self)}
        doc["roles"] = list(self.roles)
        return doc

    @classmethod
    def from_json(
        cls, doc: dict[str, Any], source: str = "<record>", location: str | None = None
    ) -> TurnRecord:
        return _from_json(cls, doc, source, location)  # type: ignore[return-value]


def turn_record(
    *,
    traj_id: str,
    turn: int,
    step: int,
    weight_version: int,
    prefill_worker: str,
    decode_worker: str | None,
    roles: tuple[str, ...],
    context_tokens: int,
    cached_prefix_tokens: int,
    decode_tokens: int,
    t_queued_s: float,
    t_prefill_start_s: float | None,
    t_prefill_end_s: float | None,
    t_kv_start_s: float | None,
    t_kv_end_s: float | None,
    t_decode_start_s: float | None,
    t_decode_end_s: float,
    new_prefill_tokens: int | None = None,
    t_env_start_s: float | None = None,
    t_env_end_s: float | None = None,
    interrupted: bool = False,
    resumed: bool = False,
) -> TurnRecord:
    """The one constructor of a `TurnRecord`, for both worlds: measured values in, a record
    that satisfies the schema out.

    Times are put in the schema's order (queued <= prefill start <= prefill end <= [KV start
    <= KV end] <= decode start <= decode end): each is raised to the one before it, which
    absorbs clock skew between processes and stale pairs left by retries; a missing prefill
    start falls back on the decode end, a missing prefill end or decode start on the phase
    before it, and a KV pair counts only when both ends are known. Tokens: the context
    counts once (at least one token); without `new_prefill_tokens` the uncached rest of the
    context is the new prefill; with it (an engine that recomputed, after a preemption
    under KV pressure or a retry, may report more than the context) the new prefill is
    capped at the context and the cached prefix at what is left.
    """
    context = max(context_tokens, 1)
    if new_prefill_tokens is None:
        cached = min(max(0, cached_prefix_tokens), context)
        new = context - cached
    else:
        new = min(max(0, new_prefill_tokens), context)
        cached = min(max(0, cached_prefix_tokens), context - new)
    p_start = max(t_decode_end_s if t_prefill_start_s is None else t_prefill_start_s, t_queued_s)
    p_end = max(p_start if t_prefill_end_s is None else t_prefill_end_s, p_start)
    kv_start, kv_end = t_kv_start_s, t_kv_end_s
    last = p_end
    if kv_start is not None and kv_end is not None:
        kv_start = max(kv_start, p_end)
        kv_end = max(kv_end, kv_start)
        last = kv_end
    else:
        kv_start = kv_end = None
    d_start = max(p_end if t_decode_start_s is None else t_decode_start_s, last)
    return TurnRecord(
        traj_id=traj_id,
        turn=turn,
        step=step,
        weight_version=weight_version,
        prefill_worker=prefill_worker,
        decode_worker=decode_worker,
        roles=roles,
        new_prefill_tokens=new,
        cached_prefix_tokens=cached,
        decode_tokens=max(0, decode_tokens),
        context_tokens=context,
        t_queued_s=t_queued_s,
        t_prefill_start_s=p_start,
        t_prefill_end_s=p_end,
        t_kv_start_s=kv_start,
        t_kv_end_s=kv_end,
        t_decode_start_s=d_start,
        t_decode_end_s=max(t_decode_end_s, d_start),
        t_env_start_s=t_env_start_s,
        t_env_end_s=t_env_end_s,
        interrupted=interrupted,
        resumed=resumed,
    )


@dataclass(frozen=True, slots=True)
class WorkerStepRecord:
    """One engine iteration of one worker (continuous batching).

    `batch_size` counts the sequences in the iteration; `prefill_tokens` the new prompt
    tokens it computed (all prefill chunks); `decode_tokens` the tokens it generated (one per
    decoding sequence); `context_tokens` the KV tokens the decoding sequences attended to (the
    sum of their context lengths); `step_time_s` the iteration's wall time. Producers may
    sample iterations (e.g. every 16th); fits only need a representative sample.
    `kv_capacity_tokens` (optional) is the worker's KV pool in tokens as its engine sized it
    at start (vLLM logs it as its GPU KV cache size); None when the producer does not know.
    """

    worker_id: str
    role: str
    step: int
    t_s: float
    batch_size: int
    prefill_tokens: int
    decode_tokens: int
    context_tokens: int
    step_time_s: float
    kv_capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_record(self)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "worker_step", **asdict(self)}

    @classmethod
    def from_json(
        cls, doc: dict[str, Any], source: str = "<record>", location: str | None = None
    ) -> WorkerStepRecord:
        return _from_json(cls, doc, source, location)  # type: ignore[return-value]


Record = TurnRecord | WorkerStepRecord

_INT_FIELDS = {
    "turn", "step", "weight_version", "new_prefill_tokens", "cached_prefix_tokens",
    "decode_tokens", "context_tokens", "batch_size", "prefill_tokens",
}  # fmt: skip
_OPT_FLOAT = {"t_kv_start_s", "t_kv_end_s", "t_env_start_s", "t_env_end_s"}


_FIELD_KINDS: dict[type, tuple[tuple[str, str], ...]] = {}


def _field_kinds(cls: type) -> tuple[tuple[str, str], ...]:
    """(name, kind) of a record class's checked fields, in declaration order; kind is
    "int", "opt_s" (optional seconds), "s" (seconds) or "nonneg_s" (seconds, >= 0)."""
    kinds = _FIELD_KINDS.get(cls)
    if kinds is None:
        out = []
        for f in fields(cls):
            if f.name in _INT_FIELDS:
                out.append((f.name, "int"))
            elif f.name.endswith("_s"):
                kind = "opt_s" if f.name in _OPT_FLOAT else "s"
                out.append((f.name, "nonneg_s" if f.name == "step_time_s" else kind))
        kinds = _FIELD_KINDS[cls] = tuple(out)
    return kinds


def _check_record(rec: Record) -> None:
    """Types, signs and time order. Raises TelemetryError(field=...) on the first problem."""

    def bad(name: str, msg: str) -> TelemetryError:
        return TelemetryError("<record>", msg, field=name)

    if type(rec) is not TurnRecord or not _turn_fields_plain(rec):
        _check_fields(rec, bad)
    if isinstance(rec, WorkerStepRecord):
        cap = rec.kv_capacity_tokens
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
            raise bad("kv_capacity_tokens", f"expected an integer >= 0 or null, got {cap!r}")
        if rec.role not in _ROLES:
            raise bad("role", f"unknown role {rec.role!r} (use {', '.join(_ROLES)})")
        return
    if not rec.roles or any(r not in _ROLES for r in rec.roles):
        raise bad("roles", f"expected a list of roles from {', '.join(_ROLES)}, got {rec.roles!r}")
    if rec.context_tokens < rec.new_prefill_tokens:
        raise bad("context_tokens", "must be >= new_prefill_tokens (it includes them)")
    if (rec.t_kv_start_s is None) != (rec.t_kv_end_s is None):
        raise bad("t_kv_end_s", "t_kv_start_s and t_kv_end_s are both set or both null")
    if (rec.t_env_start_s is None) != (rec.t_env_end_s is None):
        raise bad("t_env_end_s", "t_env_start_s and t_env_end_s are both set or both null")
    order = [
        ("t_queued_s", rec.t_queued_s),
        ("t_prefill_start_s", rec.t_prefill_start_s),
        ("t_prefill_end_s", rec.t_prefill_end_s),
        ("t_kv_start_s", rec.t_kv_start_s),
        ("t_kv_end_s", rec.t_kv_end_s),
        ("t_decode_start_s", rec.t_decode_start_s),
        ("t_decode_end_s", rec.t_decode_end_s),
        ("t_env_start_s", rec.t_env_start_s),
        ("t_env_end_s", rec.t_env_end_s),
    ]
    last_name, last = order[0][0], rec.t_queued_s
    for name, t in order[1:]:
        if t is None:
            continue
        if t < last - 1e-9:
            raise bad(name, f"{name}={t} is before {last_name}={last}")
        last_name, last = name, t


def _check_fields(rec: Record, bad: Callable[[str, str], TelemetryError]) -> None:
    """Per-field types and signs, in declaration order (the first bad field is raised)."""
    for name, kind in _field_kinds(type(rec)):
        v = getattr(rec, name)
        if kind == "int":
            if isinstance(v, bool) or not isinstance(v, int):
                raise bad(name, f"expected an integer, got {v!r}")
            if v < 0:
                raise bad(name, f"must be >= 0, got {v}")
            continue
        if v is None and kind == "opt_s":
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise bad(name, f"expected a finite number of seconds, got {v!r}")
        if kind == "nonneg_s" and v < 0:
            raise bad(name, f"must be >= 0, got {v}")


def _turn_fields_plain(rec: TurnRecord) -> bool:
    """The common case of a turn record, decided quickly: every count a plain int >= 0 and
    every time a finite plain float (optional ones may be None). When True, `_check_fields`
    would pass; when False it runs and names the first bad field."""
    for n in (
        rec.turn,
        rec.step,
        rec.weight_version,
        rec.new_prefill_tokens,
        rec.cached_prefix_tokens,
        rec.decode_tokens,
        rec.context_tokens,
    ):
        if type(n) is not int or n < 0:
            return False
    for t in (
        rec.t_queued_s,
        rec.t_prefill_start_s,
        rec.t_prefill_end_s,
        rec.t_decode_start_s,
        rec.t_decode_end_s,
    ):
        if type(t) is not float or t - t != 0.0:  # t - t is nan for inf and nan
            return False
    for o in (rec.t_kv_start_s, rec.t_kv_end_s, rec.t_env_start_s, rec.t_env_end_s):
        if o is not None and (type(o) is not float or o - o != 0.0):
            return False
    return True


def _from_json(cls: type, doc: Any, source: str, location: str | None) -> Record:
    if not isinstance(doc, dict):
        raise TelemetryError(source, "expected a JSON object", location=location)
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING}
    for name in sorted(required):
        if name not in doc:
            raise TelemetryError(source, "missing", location=location, field=name)
    unknown = sorted(set(doc) - names - {"kind"})
    if unknown:
        raise TelemetryError(source, "unknown field", location=location, field=unknown[0])
    kwargs = {k: v for k, v in doc.items() if k != "kind"}
    if cls is TurnRecord and not isinstance(kwargs.get("roles"), list | tuple):
        raise TelemetryError(source, "expected a list", location=location, field="roles")
    try:
        return cls(**kwargs)
    except TelemetryError as err:
        raise TelemetryError(source, err.message, location=location, field=err.field) from None

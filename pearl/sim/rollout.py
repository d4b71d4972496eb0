"""Trajectories through the world: batches, routed turns, KV transfer, environment steps.

Functions over a `SimWorld` (kept apart from world.py so each module holds one concept):

* `start_batch`: sample a rollout step's trajectories (the same for every policy on a seed)
  and start their sandboxes; each becomes `TrajectoryReady` when its container is up.
* `route`: submit a trajectory's current turn to its prefill (or colocated) worker.
* `on_completion`: a worker finished a prefill (-> KV transfer -> decode worker) or a turn
  (-> `TurnFinished`, environment step, then `TrajectoryReady` or `TrajectoryDone`).
* `decode_started`: a turn began decoding (`RequestPhase`, when the world reports phases).
* `interrupt_worker`: abort a worker's requests. With `preserve` (reclaim notice, return
  of borrowed GPUs: paper §4.5) each trajectory keeps its generated prefix; without it (the
  GPU vanished) the current turn restarts from the tokens saved before it was routed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pearl.control import commands as C
from pearl.control import events as E
from pearl.control.state import Role
from pearl.sim.core import PRIO_COMPLETION, Handle
from pearl.sim.physics.inference_types import Completion, CompletionKind, Request
from pearl.sim.telemetry_out import TurnTiming, turn_record
from pearl.sim.trajectories import SampledTrajectory

if TYPE_CHECKING:
    from pearl.sim.world import SimWorker, SimWorld


@dataclass(eq=False)
class TrajRun:
    """The world's view of one trajectory (the truth the controller only sees via events)."""

    traj_id: str
    key: int
    step: int
    traj: SampledTrajectory
    turn: int = 0
    generated_tokens: int = 0  # preserved tokens of the current turn (after interrupts)
    resumed: bool = False
    resume_pending: bool = False  # interrupted; its next route is its resume
    timing: TurnTiming | None = None
    done: bool = False
    transfer: Handle | None = None
    route: tuple[str, str | None] | None = None  # (prefill, decode) workers while in flight
    phase: str | None = None  # the last `RequestPhase` reported for the current route


@dataclass
class StepRun:
    step: int
    start_s: float
    traj_ids: tuple[str, ...]
    num_done: int = 0
    num_tokens: int = 0
    turns: list = field(default_factory=list)


def start_batch(world: SimWorld, cmd: C.StartRolloutBatch) -> None:
    if cmd.step in world.steps:
        return
    sampled = world.sampler_for(cmd.step).batch(len(cmd.traj_ids))
    world.steps[cmd.step] = StepRun(cmd.step, world.core.now_s, tuple(cmd.traj_ids))
    for tid, traj in zip(cmd.traj_ids, sampled, strict=True):
        key = world.new_key()
        tr = TrajRun(tid, key, cmd.step, traj)
        world.trajs[tid] = tr
        world.by_key[key] = tr
        world.schedule(traj.container_start_s, _ready(world, tr), PRIO_COMPLETION)


def _ready(world: SimWorld, tr: TrajRun):
    def run() -> None:
        tr.timing = TurnTiming(t_queued_s=world.core.now_s, resumed=tr.resumed)
        world.emit(E.TrajectoryReady(world.core.now_s, tr.traj_id))

    return run


def _bounce(world: SimWorld, tr: TrajRun, worker_id: str) -> None:
    """The route cannot run (worker gone or not serving): hand the trajectory back."""
    tr.resumed = True
    world.stats.bounced_routes += 1
    world.emit(E.RequestInterrupted(world.core.now_s, tr.traj_id, worker_id, tr.generated_tokens))


def _withdraw(world: SimWorld, tr: TrajRun) -> None:
    """The controller routed a turn that is still in flight here (it counted the request
    as lost when a worker of its old route went away, although the request had moved on,
    e.g. to its decode worker): the controller's view stands, so the old request is
    aborted where it is, keeping its generated tokens, and the turn counts as interrupted."""
    assert tr.route is not None
    if tr.transfer is not None:
        tr.transfer.cancel()
        tr.transfer = None
    for wid in tr.route:
        w = world.workers.get(wid) if wid is not None else None
        if w is None:
            continue
        w.incoming.discard(tr.traj_id)
        generated = w.engine.withdraw(tr.key, world.core.now_s)
        if generated is not None:
            tr.generated_tokens = generated
            world.touch(w)
    _cut_turn(world, tr)


def route(world: SimWorld, cmd: C.Route) -> None:
    tr = world.trajs.get(cmd.traj_id)
    if tr is None or tr.done:
        return
    if tr.route is not None:
        _withdraw(world, tr)
    now = world.core.now_s
    p = world.workers.get(cmd.prefill_worker_id)
    d = world.workers.get(cmd.decode_worker_id) if cmd.decode_worker_id is not None else None
    if (
        p is None
        or not p.ready
        or (cmd.decode_worker_id is not None and (d is None or not d.ready))
    ):
        _bounce(world, tr, cmd.prefill_worker_id)
        return
    turn = tr.traj.turns[tr.turn]
    if tr.timing is None:
        tr.timing = TurnTiming(t_queued_s=now)
    t = tr.timing
    t.weight_version = max(p.version, 0)
    t.prefill_worker = p.worker_id
    t.decode_worker = d.worker_id if d is not None else None
    t.roles = (str(p.engine.role),) if d is None else (str(p.engine.role), str(d.engine.role))
    t.context_tokens = turn.context_tokens + tr.generated_tokens
    t.resumed = t.resumed or cmd.full_prefill
    if tr.resume_pending:  # once per interruption, as `pearl run` notes it
        tr.resume_pending = False
        detail = {"traj_id": tr.traj_id, "worker": p.worker_id, "context_tokens": t.context_tokens}
        world.request_events.append((now, "resume", "resume", detail))
    tr.route = (p.worker_id, d.worker_id if d is not None else None)
    tr.phase = None
    req = Request(
        tr.key,
        tr.turn,
        turn.context_tokens,
        turn.decode_tokens,
        generated_tokens=tr.generated_tokens,
        full_prefill=cmd.full_prefill,
        t_queued_s=t.t_queued_s,
        reusable_prefix_tokens=turn.reusable_prefix_tokens,
    )
    p.engine.submit(req, now)
    world.touch(p)


def on_completion(world: SimWorld, w: SimWorker, c: Completion) -> None:
    tr = world.by_key.get(c.traj_id)
    if tr is None or tr.done or tr.timing is None:
        return
    t = tr.timing
    t.new_prefill_tokens += c.new_prefill_tokens
    if c.t_prefill_start_s is not None and t.t_prefill_start_s is None:
        t.t_prefill_start_s = c.t_prefill_start_s
        t.cached_prefix_tokens = c.cached_prefix_tokens
    if c.t_prefill_end_s is not None and t.t_kv_start_s is None:
        # A decode worker that recomputes after a preemption does not move the turn's
        # prefill (its KV was already transferred); only the prefill worker's end counts.
        t.t_prefill_end_s = c.t_prefill_end_s
    world.stats.prefill_tokens += c.new_prefill_tokens
    world.stats.cached_prefix_tokens += c.cached_prefix_tokens
    if c.kind == CompletionKind.DECODE or c.finished:
        if c.t_decode_start_s is not None and t.t_decode_start_s is None:
            t.t_decode_start_s = c.t_decode_start_s
        _finish_turn(world, tr, w.worker_id, c.t_end_s)
        return
    # A prefill-only worker finished: move the KV to the decode worker.
    tr.generated_tokens = c.generated_tokens
    decode_id = tr.route[1] if tr.route is not None else None
    d = world.workers.get(decode_id) if decode_id is not None else None
    if d is None:
        tr.route = None
        _bounce(world, tr, decode_id or w.worker_id)
        return
    xfer_s = world.hardware_of(w).kv_transfer_time_s(
        c.prompt_tokens, same_node=world.same_node(w, d)
    )
    _report_phase(world, tr, "kv_transfer")
    t.t_kv_start_s = c.t_end_s
    t.t_kv_end_s = c.t_end_s + xfer_s
    d.incoming.add(tr.traj_id)
    delay = max(0.0, c.t_end_s + xfer_s - world.core.now_s)
    tr.transfer = world.schedule(delay, _arrive(world, tr, d, c), PRIO_COMPLETION)


def _arrive(world: SimWorld, tr: TrajRun, d: SimWorker, c: Completion):
    def run() -> None:
        tr.transfer = None
        d.incoming.discard(tr.traj_id)
        if world.workers.get(d.worker_id) is not d:
            return
        turn = tr.traj.turns[tr.turn]
        req = Request(
            tr.key,
            tr.turn,
            turn.context_tokens,
            turn.decode_tokens,
            generated_tokens=tr.generated_tokens,
            t_queued_s=c.t_queued_s,
            reusable_prefix_tokens=turn.reusable_prefix_tokens,
        )
        if d.engine.role != Role.DECODE and d.engine.role != Role.COLOCATED:
            tr.route = None
            _bounce(world, tr, d.worker_id)
            return
        d.engine.submit(req, world.core.now_s)
        world.touch(d)

    return run


def decode_started(world: SimWorld, w: SimWorker, key: int) -> None:
    """The turn of trajectory `key` began decoding on `w` (its prompt done, or its KV
    taken in on the decode worker); reported once per route."""
    tr = world.by_key.get(key)
    if tr is None or tr.done or tr.route is None or w.worker_id not in tr.route:
        return
    _report_phase(world, tr, "decode")


def _report_phase(world: SimWorld, tr: TrajRun, phase: Literal["kv_transfer", "decode"]) -> None:
    if not world.phase_events or tr.phase == phase:
        return
    tr.phase = phase
    world.emit(E.RequestPhase(world.core.now_s, tr.traj_id, phase))


def _finish_turn(world: SimWorld, tr: TrajRun, worker_id: str, end_s: float) -> None:
    now = world.core.now_s
    turn = tr.traj.turns[tr.turn]
    last = tr.turn == tr.traj.num_turns - 1
    env_s = turn.env_s
    assert tr.timing is not None
    rec = turn_record(
        tr.timing,
        traj_id=tr.traj_id,
        turn=tr.turn,
        step=tr.step,
        decode_tokens=turn.decode_tokens,
        t_decode_end_s=end_s,
        t_env_start_s=None if last else now,
        t_env_end_s=None if last else now + env_s,
    )
    world.stats.decode_tokens += turn.decode_tokens - tr.generated_tokens
    tr.route = None
    tr.generated_tokens = 0
    tr.resumed = False
    tr.timing = None
    world.steps[tr.step].turns.append(rec)
    world.emit(E.TurnFinished(now, tr.traj_id, worker_id, rec))
    if last:
        world.schedule(env_s, lambda: _traj_done(world, tr), PRIO_COMPLETION)
    else:
        tr.turn += 1
        world.schedule(env_s, _ready(world, tr), PRIO_COMPLETION)


def _traj_done(world: SimWorld, tr: TrajRun) -> None:
    tr.done = True
    world.traj_done_times_s.append(world.core.now_s)
    world.emit(E.TrajectoryDone(world.core.now_s, tr.traj_id))
    world.stats.trajectories_done += 1
    world.stats.trajectory_tokens += tr.traj.total_tokens
    s = world.steps[tr.step]
    s.num_done += 1
    s.num_tokens += tr.traj.total_tokens
    if s.num_done == len(s.traj_ids):
        world.step_finished(s)


def interrupt_worker(world: SimWorld, w: SimWorker, *, preserve: bool) -> None:
    """Abort every request on `w` (and every KV transfer heading to it)."""
    now = world.core.now_s
    why = "interrupted, prefix kept" if preserve else "worker lost with its GPUs"
    for p in w.engine.interrupt_all(now):
        tr = world.by_key.get(p.traj_id)
        if tr is None or tr.done:
            continue
        if preserve:
            tr.generated_tokens = p.generated_tokens
        _interrupted(world, tr, w.worker_id, why)
    for tid in sorted(w.incoming):
        tr = world.trajs[tid]
        if tr.transfer is not None:
            tr.transfer.cancel()
            tr.transfer = None
        _interrupted(world, tr, w.worker_id, why)
    w.incoming.clear()
    world.touch(w)


def _cut_turn(world: SimWorld, tr: TrajRun) -> None:
    """The turn in flight is cut short: unrouted, to resume with a full prefill."""
    tr.route = None
    tr.resumed = True
    if tr.timing is not None:
        tr.timing.interrupted = True
    world.stats.interrupted_requests += 1


def _interrupted(world: SimWorld, tr: TrajRun, worker_id: str, why: str) -> None:
    _cut_turn(world, tr)
    tr.resume_pending = True
    detail = {"traj_id": tr.traj_id, "worker": worker_id, "kept_tokens": tr.generated_tokens}
    world.request_events.append((world.core.now_s, "interrupt", why, detail))
    world.emit(E.RequestInterrupted(world.core.now_s, tr.traj_id, worker_id, tr.generated_tokens))

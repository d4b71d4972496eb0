"""The real world's trajectories component (`RayWorld.trajectories`; the simulator's is
`pearl.sim.rollout`): it executes StartRolloutBatch and Route.

It owns the token-level record of every trajectory of the batches in flight, runs each
routed turn on the worker actors (a prefill worker then a decode worker when the route is
split; the turn streams back, or comes back interrupted with its prefix), hands finished
turns to the environment pool and turns its answers into the controller's events
(`TurnFinished`, `RequestInterrupted`, `TrajectoryReady`, `TrajectoryDone`). `Flights`
keeps one request per trajectory in flight: a route that supersedes a request still
running waits for it to land.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.envs.pool import EnvPool
from pearl.runtime.engine import ByteTokenizer, SamplingParams
from pearl.runtime.flights import Flight, Flights
from pearl.runtime.run_config import RunConfig
from pearl.runtime.trajectory import RuntimeTrajectory
from pearl.runtime.worker.api import (
    INTERRUPTED,
    KV_LOST,
    NO_VERSION,
    WORKER_LOST,
    TokenChunk,
    TurnRequest,
    TurnResult,
    collect_turn,
)

log = logging.getLogger(__name__)


class RayTrajectories:
    """Trajectories and their turns. `workers` is the worker component's actor table;
    `counters` the world's (turns, interrupts, resumes are counted here)."""

    def __init__(
        self,
        *,
        cfg: RunConfig,
        env: EnvPool,
        workers: dict[str, Any],
        emit: Callable[[Any], None],
        now: Callable[[], float],
        on_record: Callable[[str, Any], None],
        counters: dict[str, int],
        spawn: Callable[[Any], asyncio.Task],
        rng: random.Random,
    ) -> None:
        self.cfg = cfg
        self.env = env
        self.workers = workers
        self.emit = emit
        self.now = now
        self.on_record = on_record
        self.counters = counters
        self.spawn = spawn
        self.rng = rng
        self.tok = ByteTokenizer()
        self.num_tasks = getattr(env, "num_tasks", None)
        self.trajs: dict[str, RuntimeTrajectory] = {}
        self.restored_done: dict[str, RuntimeTrajectory] = {}  # finished before a resume
        self.turn_records: dict[int, list[Any]] = {}
        self.last_record: dict[str, Any] = {}
        # the record of a turn the controller cancelled after it had finished whole: the
        # next route completes that turn without running it, and reports this record
        self.whole_turn_record: dict[str, Any] = {}
        self.flights = Flights(workers.get)

    async def pump_env(self) -> None:
        """Collect finished environment operations forever (the pool is polled, not blocked on)."""
        while True:
            for res in self.env.wait(timeout_s=0):
                self.on_env_result(res)
            await asyncio.sleep(0.01)

    def start_batch(self, c: cmd.StartRolloutBatch) -> None:
        for tid in c.traj_ids:
            restored = self.restored_done.pop(tid, None)
            if restored is not None:  # finished before a crash: keep it, do not regenerate
                self.trajs[tid] = restored
                self.emit(ev.TrajectoryDone(self.now(), tid))
                continue
            step, group, _ = _parse_tid(tid)
            task_id = self._task_of(step, group)
            self.trajs[tid] = RuntimeTrajectory(tid, step, group, task_id)
            self.env.submit_reset(tid, task_id, self.cfg.seed)

    def _task_of(self, step: int, group: int) -> int:
        n = self.num_tasks or 1000
        return random.Random(f"{self.cfg.seed}:{step}:{group}").randrange(n)

    def route(self, c: cmd.Route) -> asyncio.Task:
        """Run the routed turn (a task); reserved now, so that an interrupt of its workers
        before the task begins still reaches it (`Flights`)."""
        dec_id = c.decode_worker_id or c.prefill_worker_id
        return self.spawn(
            self.turn(c, self.flights.reserve(c.traj_id, c.prefill_worker_id, dec_id))
        )

    async def turn(self, c: cmd.Route, flight: Flight) -> None:
        await self.flights.wait_idle(c.traj_id)
        self.flights.unreserve(c.traj_id, flight)
        traj = self.trajs.get(c.traj_id)
        if traj is None:
            return
        if flight.cancelled:  # its worker was interrupted or stopped before the turn began
            res = TurnResult(
                c.traj_id, traj.num_turns, (), (), INTERRUPTED, c.prefill_worker_id, NO_VERSION
            )
            traj.keep_partial((), (), NO_VERSION)  # counts the interruption; nothing to keep
            self._interrupted(c, res, traj, "cancelled by the controller before it began", flight)
            return
        if traj.done:  # its episode ended while this route waited: close it in the book
            self._finish_turn_event(
                c.traj_id, c.decode_worker_id or c.prefill_worker_id, None, flight
            )
            self.emit(ev.TrajectoryDone(self.now(), c.traj_id))
            return
        rc = self.cfg.rollout
        prompt = traj.prompt()
        if c.full_prefill and traj.num_resumes < traj.num_interrupts:  # once per interruption
            traj.num_resumes += 1
            self.counters["resumes"] += 1
            self.on_record(
                "resume",
                {
                    "traj_id": c.traj_id,
                    "worker": c.prefill_worker_id,
                    "context_tokens": len(prompt),
                },
            )
        if traj.partial_ids and (
            traj.partial_complete or len(traj.partial_ids) >= rc.max_new_tokens
        ):
            # interrupted after its last token: the turn is complete, its env step follows
            turn_ids = traj.finish_turn((), (), traj.partial_versions[-1])
            self._finish_turn_event(
                c.traj_id,
                c.decode_worker_id or c.prefill_worker_id,
                self.whole_turn_record.pop(c.traj_id, None),
                flight,
            )
            self.flights.hold(c.traj_id)  # busy until the env answers
            self.env.submit_step(c.traj_id, self.tok.decode([t for t in turn_ids if t < 256]))
            return
        budget = min(rc.max_new_tokens - len(traj.partial_ids), rc.max_context_tokens - len(prompt))
        if budget < 1:  # the length limit ends the trajectory (a turn cut by it is kept)
            if traj.partial_ids:
                traj.finish_turn((), (), traj.partial_versions[-1] if traj.partial_versions else 0)
            traj.truncated = True
            self.env.close_session(c.traj_id)
            self._finish_turn_event(
                c.traj_id, c.decode_worker_id or c.prefill_worker_id, None, flight
            )
            self.traj_done(traj)
            return
        seed = self.rng.randrange(1 << 30)
        req = TurnRequest(
            c.traj_id,
            traj.num_turns,
            tuple(prompt),
            SamplingParams(
                temperature=rc.temperature,
                top_p=rc.top_p,
                max_new_tokens=budget,
                seed=seed,
                stop_token_ids=(self.tok.eos_token_id,),
            ),
            step=traj.step,
            resumed=c.full_prefill and traj.num_interrupts > 0,
            t_queued_s=time.time(),
        )
        flight.request_id = req.request_id
        self.flights.begin(c.traj_id, flight)
        try:
            res = await self.run_turn(req, c)
        except Exception as err:  # noqa: BLE001 - never strand a trajectory: it is retried
            log.exception("turn of %s failed", c.traj_id)
            self.on_record("error", f"turn of {c.traj_id} failed: {err!r}"[:300])
            res = TurnResult(
                req.traj_id, req.turn, (), (), WORKER_LOST, c.prefill_worker_id, NO_VERSION,
                error=f"turn failed: {err!r}"[:200],
            )  # fmt: skip
        self.counters["turns"] += 1
        landed = self.flights.land(c.traj_id)
        ended = res.interrupted or res.error is not None
        if landed is not None and landed.cancelled and not ended:
            # the controller interrupted it after it had finished: keep it as a whole prefix
            traj.keep_partial(res.token_ids, res.logprobs, res.weight_version)
            traj.partial_complete = True
            if res.record is not None:
                self.whole_turn_record[c.traj_id] = res.record
            self._interrupted(c, res, traj, "cancelled by the controller after it finished", flight)
            return
        if res.interrupted or res.error is not None and not _is_length_refusal(res):
            traj.keep_partial(res.token_ids, res.logprobs, res.weight_version)
            self._interrupted(c, res, traj, res.error or res.finish_reason, flight)
            return
        if res.error is not None:  # refused for length: the trajectory ends here
            traj.truncated = True
            self.env.close_session(c.traj_id)
            self._finish_turn_event(c.traj_id, res.worker_id, None, flight)
            self.traj_done(traj)
            return
        turn_ids = traj.finish_turn(res.token_ids, res.logprobs, res.weight_version)
        self._finish_turn_event(c.traj_id, res.worker_id, res.record, flight)
        text = self.tok.decode([t for t in turn_ids if t < 256])
        self.env.submit_step(c.traj_id, text)

    def _interrupted(
        self, c: cmd.Route, res: TurnResult, traj: RuntimeTrajectory, why: str, flight: Flight
    ) -> None:
        """The turn ended interrupted, its prefix kept: the controller routes it again."""
        self.counters["interrupts"] += 1
        self.on_record(
            "interrupt",
            {
                "traj_id": c.traj_id,
                "worker": res.worker_id,
                "reason": why,
                "kept_tokens": len(res.token_ids),
            },
        )
        self.flights.settle(c.traj_id)
        event = ev.RequestInterrupted(
            self.now(), c.traj_id, res.worker_id or c.prefill_worker_id, len(traj.partial_ids)
        )
        self.emit(self.flights.tag(event, flight))

    async def run_turn(self, req: TurnRequest, c: cmd.Route) -> TurnResult:
        pre_h = self.workers.get(c.prefill_worker_id)
        dec_id = c.decode_worker_id or c.prefill_worker_id
        dec_h = self.workers.get(dec_id)
        if pre_h is None or dec_h is None:
            return TurnResult(
                req.traj_id,
                req.turn,
                (),
                (),
                WORKER_LOST,
                c.prefill_worker_id,
                NO_VERSION,
                error="worker unknown",
            )
        prefill = None
        if c.decode_worker_id is not None:
            try:
                prefill = await _aget(pre_h.prefill.remote(req))
            except Exception as err:  # noqa: BLE001 - the prefill worker died
                return TurnResult(
                    req.traj_id,
                    req.turn,
                    (),
                    (),
                    WORKER_LOST,
                    c.prefill_worker_id,
                    NO_VERSION,
                    error=repr(err)[:200],
                )
            if not prefill.needs_decode:
                return prefill.as_turn_result()
            self.counters["kv_handoffs"] += 1  # the KV leaves the prefill worker
            phase = ev.RequestPhase(self.now(), req.traj_id, "kv_transfer")
            self.emit(self.flights.tag(phase, self.flights.current(req.traj_id)))
        decoding = False

        def on_chunk(chunk: TokenChunk) -> None:  # the first tokens: the turn is decoding
            nonlocal decoding
            if chunk.token_ids and not decoding:
                decoding = True
                phase = ev.RequestPhase(self.now(), req.traj_id, "decode")
                self.emit(self.flights.tag(phase, self.flights.current(req.traj_id)))

        stream: Any = dec_h.serve.options(num_returns="streaming").remote(req, prefill)
        res = await collect_turn(stream, req, dec_id, on_chunk=on_chunk, prefill=prefill)
        if res.finish_reason == KV_LOST and prefill is not None:
            return dataclasses.replace(
                res,
                token_ids=prefill.token_ids + res.token_ids,
                logprobs=prefill.logprobs + res.logprobs,
            )
        return res

    def _finish_turn_event(self, traj_id: str, worker_id: str, record: Any, flight: Flight) -> None:
        if record is not None:
            self.last_record[traj_id] = record
        event = ev.TurnFinished(self.now(), traj_id, worker_id, record)
        self.emit(self.flights.tag(event, flight))

    def on_env_result(self, res: Any) -> None:
        self.flights.settle(res.traj_id)  # a route waiting for this step may go (it runs later)
        traj = self.trajs.get(res.traj_id)
        if traj is None:
            return
        if res.error is not None:
            self.on_record("error", {"traj_id": res.traj_id, "env_error": res.error})
            self.traj_done(traj)
            return
        rec = self.last_record.pop(res.traj_id, None)
        if rec is not None:
            rec = _with_env_times(rec, res.record)
            self.turn_records.setdefault(traj.step, []).append(rec)
        obs = res.observation if res.step is None else res.step.observation
        ids = list(self.tok.encode(obs.text))
        if not traj.token_ids:
            ids = [self.tok.bos_token_id, *ids]
        traj.add_context(ids)
        if res.step is not None:
            traj.reward += float(res.step.reward)
            if res.step.done:
                self.traj_done(traj)
                return
        if len(traj.token_ids) >= self.cfg.rollout.max_context_tokens:
            traj.truncated = True
            self.env.close_session(traj.traj_id)
            self.traj_done(traj)
            return
        self.emit(ev.TrajectoryReady(self.now(), traj.traj_id))

    def traj_done(self, traj: RuntimeTrajectory) -> None:
        self.flights.settle(traj.traj_id)
        self.whole_turn_record.pop(traj.traj_id, None)
        if traj.done:
            return
        traj.done = True
        self.emit(ev.TrajectoryDone(self.now(), traj.traj_id))

    # -- step bookkeeping ------------------------------------------------------------------
    def step_trajs(self, step: int) -> list[RuntimeTrajectory]:
        return sorted((t for t in self.trajs.values() if t.step == step), key=lambda t: t.traj_id)

    def pop_step(self, step: int) -> tuple[list[RuntimeTrajectory], list[Any]]:
        trajs = self.step_trajs(step)
        for t in trajs:
            self.trajs.pop(t.traj_id, None)
        return trajs, self.turn_records.pop(step, [])


async def _aget(ref: Any) -> Any:
    return await ref


def _parse_tid(tid: str) -> tuple[int, int, int]:
    """`s{step}-g{group}-{i}` (the book's ids) -> (step, group, i)."""
    s, g, i = tid.split("-")
    return int(s[1:]), int(g[1:]), int(i)


def _is_length_refusal(res: TurnResult) -> bool:
    text = (res.error or "") + " " + res.finish_reason
    return "context" in text or "too long" in text or "length" in text


def _with_env_times(rec: Any, env_record: Any) -> Any:
    try:
        return dataclasses.replace(
            rec, t_env_start_s=env_record.t_start_s, t_env_end_s=env_record.t_end_s
        )
    except (TypeError, AttributeError, ValueError):
        return rec

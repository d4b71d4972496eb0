"""The decoding requests of a simulated worker, advanced lazily.

Every iteration includes every decoding request, so a request that joined at decode step
d0 has advanced by (step - d0): the set keeps one step counter instead of touching each
request per iteration (`Seq.sync` materialises a request's counters), the sum of the
decoding contexts, and a heap of the steps at which requests finish. Owned by the worker's
batching core (`pearl.sim.physics.batching`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from pearl.sim.physics.worker_state import Seq


class DecodeSet:
    """Decoding requests by admission number, their decode step and their contexts' sum."""

    __slots__ = ("_seqs", "_finish_heap", "step", "ctx_sum")

    def __init__(self) -> None:
        self._seqs: dict[int, Seq] = {}
        self._finish_heap: list[tuple[int, int, Seq]] = []  # (finish step, admit_no, seq)
        self.step = 0  # decode iterations so far
        self.ctx_sum = 0  # the decoding requests' KV tokens

    def __len__(self) -> int:
        return len(self._seqs)

    def __iter__(self) -> Iterator[Seq]:
        return iter(self._seqs.values())

    def holds(self, s: Seq) -> bool:
        return self._seqs.get(s.admit_no) is s

    def add(self, s: Seq, t_s: float) -> None:
        """`s` joins the decodes at time t_s (from the next iteration on)."""
        s.start_decode(t_s, self.step)
        self._seqs[s.admit_no] = s
        self.ctx_sum += s.kv
        heapq.heappush(self._finish_heap, (s.d_finish, s.admit_no, s))

    def remove(self, s: Seq) -> None:
        """Take `s` out (preempted or aborted), its counters materialised."""
        s.sync(self.step)
        del self._seqs[s.admit_no]
        self.ctx_sum -= s.kv

    def advance(self, n: int) -> None:
        """n iterations: every request generates n tokens and grows its KV by n."""
        self.step += n
        self.ctx_sum += len(self._seqs) * n

    def pop_finished(self) -> list[Seq]:
        """Take out the requests whose last token the iterations so far produced, in the
        order they finish (ties by admission)."""
        heap = self._finish_heap
        out: list[Seq] = []
        while heap and heap[0][0] <= self.step:
            _, no, s = heapq.heappop(heap)
            if self._seqs.get(no) is s:  # else stale (preempted since)
                self.remove(s)
                out.append(s)
        return out

    def steps_to_next_finish(self) -> int:
        """Decode steps until the first decoding request finishes (>= 1; the set is not
        empty)."""
        heap = self._finish_heap
        while self._seqs.get(heap[0][1]) is not heap[0][2]:
            heapq.heappop(heap)  # stale entry of a preempted request
        return heap[0][0] - self.step

    def sync_all(self) -> None:
        for s in self._seqs.values():
            s.sync(self.step)

    def clear(self) -> None:
        self._seqs.clear()
        self._finish_heap.clear()
        self.ctx_sum = 0

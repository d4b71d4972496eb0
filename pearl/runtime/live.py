"""The live terminal view of `pearl run`: step, reward, trajectories, GPUs by zone and role,
the last decision and the latest events.

On a terminal it redraws a `rich.live.Live` panel on stderr (stdout stays free for --json).
When stderr is not a terminal, or `enabled=False`, it prints plain one-line updates
instead, at most one every `min_interval_s` seconds (the latest state is printed on exit
if a line was held back), so logs of unattended runs stay short.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

ROLES = ("colocated", "prefill", "decode", "initializing", "draining", "inactive", "idle")
_ZONE_ORDER = {"dedicated": 0, "preemptible": 1, "overlap": 2}


def _zones(gpus: dict[str, dict[str, int]]) -> list[tuple[str, dict[str, int]]]:
    """Zones in the order of the paper's setting: dedicated, preemptible, overlap, others."""
    return sorted(gpus.items(), key=lambda kv: (_ZONE_ORDER.get(kv[0], 9), kv[0]))


class LiveView:
    """Context manager; call `update(...)` whenever something changed (cheap to call often).

    `console` (for tests) replaces the stderr console; `clock` the monotonic clock used to
    rate-limit plain lines.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        min_interval_s: float = 5.0,
        max_events: int = 6,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console if console is not None else Console(stderr=True)
        self.rich = enabled and self.console.is_terminal
        self.min_interval_s = min_interval_s
        self.max_events = max_events
        self._clock = clock
        self._live: Live | None = None
        self._fields: dict[str, Any] | None = None
        self._last_line_at: float | None = None
        self._pending = False
        self.lines_printed = 0

    # -- context ---------------------------------------------------------------------------
    def __enter__(self) -> LiveView:
        if self.rich:
            self._live = Live(
                self._render(), console=self.console, refresh_per_second=4, transient=False
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
            self._live.__exit__(None, None, None)
            self._live = None
        elif self._pending and self._fields is not None:
            self._print_line()

    # -- updates ---------------------------------------------------------------------------
    def update(
        self,
        *,
        step: int,
        num_steps: int,
        reward: float | None,
        trajectories_done: int,
        batch_size: int,
        gpus_by_zone_role: dict[str, dict[str, int]],
        last_decision: str,
        events: list[str],
    ) -> None:
        """Show the run's current state. `gpus_by_zone_role[zone][role_or_status]` counts
        devices; `events` are one-line descriptions, newest last (the view keeps the tail)."""
        self._fields = {
            "step": step,
            "num_steps": num_steps,
            "reward": reward,
            "trajectories_done": trajectories_done,
            "batch_size": batch_size,
            "gpus": {z: dict(r) for z, r in gpus_by_zone_role.items()},
            "last_decision": last_decision,
            "events": list(events)[-self.max_events :],
        }
        if self._live is not None:
            self._live.update(self._render())
            return
        now = self._clock()
        if self._last_line_at is None or now - self._last_line_at >= self.min_interval_s:
            self._print_line()
        else:
            self._pending = True

    # -- rendering -------------------------------------------------------------------------
    def plain_line(self) -> str:
        """The one-line form of the latest update."""
        f = self._fields
        if f is None:
            return "pearl run: starting"
        gpus = " ".join(
            f"{zone}[{','.join(f'{r}={n}' for r, n in roles.items() if n)}]"
            for zone, roles in _zones(f["gpus"])
        )
        last_event = f" | {f['events'][-1].strip()}" if f["events"] else ""
        return (
            f"step {f['step']}/{f['num_steps']} reward {_reward(f['reward'])} "
            f"traj {f['trajectories_done']}/{f['batch_size']} | {gpus} | "
            f"{f['last_decision']}{last_event}"
        )

    def _print_line(self) -> None:
        self.console.print(self.plain_line(), highlight=False, soft_wrap=True, markup=False)
        self._last_line_at = self._clock()
        self._pending = False
        self.lines_printed += 1

    def _render(self) -> Any:
        f = self._fields
        if f is None:
            return Panel(Text("starting..."), title="pearl run")
        head = Text.assemble(
            ("step ", "dim"),
            (f"{f['step']}/{f['num_steps']}", "bold"),
            ("   reward ", "dim"),
            (_reward(f["reward"]), "bold green"),
            ("   trajectories ", "dim"),
            (f"{f['trajectories_done']}/{f['batch_size']}", "bold"),
        )
        table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
        table.add_column("zone")
        roles = [r for r in ROLES if any(r in z for z in f["gpus"].values())]
        roles += sorted({r for z in f["gpus"].values() for r in z} - set(roles))
        for r in roles:
            table.add_column(r, justify="right")
        for zone, counts in _zones(f["gpus"]):
            table.add_row(zone, *(str(counts.get(r, 0)) for r in roles))
        parts: list[Any] = [head, table, Text(f"decision: {f['last_decision']}", style="cyan")]
        parts += [Text(f"- {e.strip()}", style="yellow") for e in f["events"]]
        return Panel(Group(*parts), title="pearl run", expand=False)


def _reward(r: float | None) -> str:
    return "-" if r is None else f"{r:.3f}"

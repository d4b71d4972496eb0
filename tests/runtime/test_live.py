"""LiveView: rich panel on a terminal, rate-limited plain lines otherwise."""

import io

from rich.console import Console

from pearl.runtime.live import LiveView

GPUS = {
    "overlap": {"idle": 2},
    "preemptible": {"prefill": 1, "decode": 1, "idle": 0},
    "dedicated": {"colocated": 2},
}


def _update(view: LiveView, step: int, events: list[str] | None = None) -> None:
    view.update(
        step=step,
        num_steps=10,
        reward=0.125 * step,
        trajectories_done=3 * step,
        batch_size=16,
        gpus_by_zone_role=GPUS,
        last_decision=f"keep colocated:2 (step {step})",
        events=events or [],
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_are_rate_limited_and_the_last_one_is_not_lost():
    buf = io.StringIO()
    clock = FakeClock()
    view = LiveView(
        enabled=True, console=Console(file=buf, width=300), clock=clock, min_interval_s=5.0
    )
    assert not view.rich  # a StringIO is not a terminal
    with view:
        for step in range(1, 11):  # one update per second for 10 s
            _update(view, step)
            clock.now += 1.0
    lines = buf.getvalue().splitlines()
    assert [ln.split()[1] for ln in lines] == ["1/10", "6/10", "10/10"]
    assert view.lines_printed == 3


def test_plain_line_carries_every_field():
    buf = io.StringIO()
    with LiveView(enabled=False, console=Console(file=buf, width=300)) as view:
        _update(view, 4, events=["old event", "  12.0s preemption: p0 reclaimed"])
    (line,) = buf.getvalue().splitlines()
    assert line.startswith("step 4/10 reward 0.500 traj 12/16")
    zones = ["dedicated[colocated=2]", "preemptible[prefill=1,decode=1]", "overlap[idle=2]"]
    assert [line.index(z) for z in zones] == sorted(line.index(z) for z in zones)
    assert "keep colocated:2 (step 4)" in line and line.endswith("| 12.0s preemption: p0 reclaimed")


def test_disabled_view_never_draws_the_panel_even_on_a_terminal():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with LiveView(enabled=False, console=console) as view:
        _update(view, 1)
    assert not view.rich and "╭" not in buf.getvalue()


def test_terminal_view_draws_a_panel_with_zones_roles_and_recent_events():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120, color_system=None)
    with LiveView(console=console, max_events=2) as view:
        assert view.rich
        _update(view, 7, events=["e1 dropped", "e2 borrow o0", "e3 pd_reconfig"])
    out = buf.getvalue()
    assert "7/10" in out and "0.875" in out and "21/16" in out
    assert "dedicated" in out and "preemptible" in out and "prefill" in out
    assert "e3 pd_reconfig" in out and "e2 borrow o0" in out and "e1 dropped" not in out
    assert view.lines_printed == 0

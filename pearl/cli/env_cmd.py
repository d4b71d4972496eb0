"""`pearl env`: list the environments and play a few actions in one by hand."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from pearl.cli.output import console, guarded, print_json
from pearl.errors import InputError


def register(app: typer.Typer) -> None:
    env_app = typer.Typer(help="Agentic environments (see docs/environments.md).")
    app.add_typer(env_app, name="env")

    @env_app.command("list")
    @guarded
    def list_(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    ) -> None:
        """The registered environments, their task counts and turn limits."""
        from pearl.envs import env_names, make_env
        from pearl.envs.code_repair import isolation

        rows: list[dict[str, Any]] = []
        for name in env_names():
            env = make_env(name)
            rows.append({"name": name, "num_tasks": env.num_tasks, "max_turns": env.max_turns})
            env.close()
        level = isolation().level
        if as_json:
            print_json({"environments": rows, "sandbox_isolation": level})
            return
        table = Table("name", "tasks", "max turns")
        for row in rows:
            table.add_row(row["name"], str(row["num_tasks"]), str(row["max_turns"]))
        console.print(table)
        console.print(f"sandbox isolation on this machine: [bold]{level}[/bold]")

    @env_app.command("play")
    @guarded
    def play(
        name: str = typer.Argument(..., help="Environment name (see `pearl env list`)."),
        task: int = typer.Option(0, "--task", help="Task id, 0 <= task < num_tasks."),
        seed: int = typer.Option(0, "--seed", help="Episode seed."),
        actions: list[str] = typer.Option(
            [], "--action", "-a", help="An action (model response); repeat for more turns."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    ) -> None:
        """Reset a task, apply the given actions in order, show every observation."""
        from pearl.envs import make_env

        try:
            env = make_env(name)
        except KeyError as err:
            raise InputError("<argument>", str(err.args[0]), field="NAME") from None
        try:
            try:
                obs = env.reset(task, seed)
            except ValueError as err:
                raise InputError("<argument>", str(err), field="--task") from None
            steps = []
            for action in actions:
                res = env.step(action)
                steps.append({"action": action, **res.to_json()})
                if res.done:
                    break
        finally:
            env.close()
        total = sum(s["reward"] for s in steps)
        if as_json:
            doc = {"env": name, "task": task, "seed": seed, "reset": obs.to_json()}
            print_json({**doc, "steps": steps, "return": total})
            return
        console.print(obs.text, highlight=False, markup=False, soft_wrap=True, end="")
        for s in steps:
            console.print(f"> {s['action']}", style="bold", highlight=False, markup=False)
            console.print(
                s["observation"]["text"], highlight=False, markup=False, soft_wrap=True, end=""
            )
            console.print(f"  reward {s['reward']:.3f}  done {s['done']}", style="dim")
        console.print(f"return {total:.3f}")

"""`pearl report`: rebuild a run directory's report from what it recorded."""

from __future__ import annotations

from pathlib import Path

import typer

from pearl.cli.output import console, guarded, print_json
from pearl.errors import InputError


def register(app: typer.Typer) -> None:
    @app.command("report")
    @guarded
    def report(
        run_dir: Path = typer.Argument(
            ..., help="A run directory: `pearl run`'s, or one policy's from `pearl simulate --out`."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    ) -> None:
        """Write report.md and its plots for a run directory, e.g. one whose run was stopped."""
        from pearl.report.run_report import build_report, load_run
        from pearl.report.rundir import CONFIG_FILE, JSONL_FILES, is_run_dir

        if not run_dir.is_dir():
            why = "not a directory" if run_dir.exists() else "no such directory"
            raise InputError(str(run_dir), why, field="RUN_DIR")
        recorded = [n for n in JSONL_FILES if (run_dir / n).is_file()]
        if not is_run_dir(run_dir) or not recorded:
            inside = sorted(p.name for p in run_dir.iterdir() if p.is_dir() and is_run_dir(p))
            if inside:  # the --out of `pearl simulate`: one run directory per policy
                why = f"holds one run directory per policy ({', '.join(inside)}): name one"
            elif not is_run_dir(run_dir):
                why = f"not a run directory (no {CONFIG_FILE})"
            else:
                why = f"nothing recorded yet (no {', '.join(JSONL_FILES)})"
            raise InputError(str(run_dir), why, field="RUN_DIR")
        run = load_run(run_dir)
        path = build_report(run_dir, run)
        doc = {
            "report": str(path),
            "steps": len(run.steps),
            "states": len(run.states),
            "decisions": len(run.decisions),
            "events": len(run.events),
            "skipped_lines": dict(run.skipped_lines),
        }
        if as_json:
            print_json(doc)
            return
        console.print(
            f"report: {path} ({doc['steps']} step(s), {doc['events']} event(s), "
            f"{doc['decisions']} decision line(s))",
            highlight=False,
            soft_wrap=True,
        )
        for name, n in run.skipped_lines.items():
            console.print(f"skipped {n} unreadable line(s) of {name}", highlight=False)

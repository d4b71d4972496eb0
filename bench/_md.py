"""Write one benchmark's section of BENCHMARKS.md between `<!-- bench:NAME -->` markers."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "BENCHMARKS.md"


def machine_line() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPU core(s), Python {platform.python_version()}"


def write_section(name: str, body: str) -> None:
    """Replace (or append) the section `name` of BENCHMARKS.md with `body`."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.strip()}\n{end}"
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block + "\n"
    )
    BENCHMARKS.write_text(text)

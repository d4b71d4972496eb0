"""The bundled projects: small Python packages, each with one bug and a failing test.

Each `Project` is plain data: its files (path -> text), an issue-style description, and a
reference fix (`fix_path`, `fix_old`, `fix_new`: replacing `fix_old` once by `fix_new` in
`fix_path` makes every test pass) that the tests and the oracle policy use. Tests live under
`tests/` (read-only to the model) and use plain asserts whose message shows the actual value,
because the sandbox runner has no assertion rewriting.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    description: str
    files: tuple[tuple[str, str], ...]
    fix_path: str
    fix_old: str
    fix_new: str

    @property
    def num_tests(self) -> int:
        return sum(
            text.count("\ndef test_") for path, text in self.files if path.startswith("tests/")
        )


PROJECTS: tuple[Project, ...] = (
    Project(
        name="stats",
        description="mean() of a list of numbers is too large: mean([2, 4]) should be 3.0.",
        files=(
            (
                "stats.py",
                "def total(xs):\n    return sum(xs)\n\n\ndef mean(xs):\n"
                '    """Arithmetic mean of a non-empty list."""\n'
                "    return total(xs) / (len(xs) - 1)\n",
            ),
            (
                "tests/test_stats.py",
                "from stats import mean, total\n\n\ndef test_total():\n"
                "    assert total([1, 2, 3]) == 6, total([1, 2, 3])\n\n\ndef test_mean():\n"
                "    assert mean([2, 4]) == 3.0, mean([2, 4])\n"
                "    assert mean([5]) == 5.0, mean([5])\n",
            ),
        ),
        fix_path="stats.py",
        fix_old="(len(xs) - 1)",
        fix_new="len(xs)",
    ),
    Project(
        name="slug",
        description="slugify() keeps capital letters: slugify('Hello World') should be 'hello-world'.",
        files=(
            (
                "text/slug.py",
                'def slugify(title):\n    """Lower-case words joined by dashes."""\n'
                '    words = title.split()\n    return "-".join(words)\n',
            ),
            ("text/__init__.py", ""),
            (
                "tests/test_slug.py",
                "from text.slug import slugify\n\n\ndef test_slugify():\n"
                "    got = slugify('Hello World')\n    assert got == 'hello-world', got\n\n\n"
                "def test_spaces():\n    got = slugify('  a   b ')\n    assert got == 'a-b', got\n",
            ),
        ),
        fix_path="text/slug.py",
        fix_old="title.split()",
        fix_new="title.lower().split()",
    ),
    Project(
        name="stack",
        description="Stack.pop() returns the oldest item instead of the newest one.",
        files=(
            (
                "stack.py",
                "class Stack:\n    def __init__(self):\n        self.items = []\n\n"
                "    def push(self, item):\n        self.items.append(item)\n\n"
                "    def pop(self):\n        return self.items.pop(0)\n\n"
                "    def __len__(self):\n        return len(self.items)\n",
            ),
            (
                "tests/test_stack.py",
                "from stack import Stack\n\n\ndef test_lifo():\n    s = Stack()\n"
                "    for x in (1, 2, 3):\n        s.push(x)\n    got = s.pop()\n"
                "    assert got == 3, got\n    assert len(s) == 2, len(s)\n",
            ),
        ),
        fix_path="stack.py",
        fix_old="self.items.pop(0)",
        fix_new="self.items.pop()",
    ),
    Project(
        name="fizzbuzz",
        description="fizzbuzz(15) returns 'Fizz'; multiples of 15 must give 'FizzBuzz'.",
        files=(
            (
                "fizz.py",
                "def fizzbuzz(n):\n    if n % 3 == 0:\n        return 'Fizz'\n"
                "    if n % 5 == 0:\n        return 'Buzz'\n    if n % 15 == 0:\n"
                "        return 'FizzBuzz'\n    return str(n)\n",
            ),
            (
                "tests/test_fizz.py",
                "from fizz import fizzbuzz\n\n\ndef test_small():\n"
                "    got = [fizzbuzz(i) for i in (1, 3, 5)]\n    assert got == ['1', 'Fizz', 'Buzz'], got\n\n\n"
                "def test_fifteen():\n    got = fizzbuzz(30)\n    assert got == 'FizzBuzz', got\n",
            ),
        ),
        fix_path="fizz.py",
        fix_old="    if n % 3 == 0:\n        return 'Fizz'\n",
        fix_new="    if n % 15 == 0:\n        return 'FizzBuzz'\n    if n % 3 == 0:\n        return 'Fizz'\n",
    ),
    Project(
        name="window",
        description="last_n(xs, n) should return the last n items but returns one too few.",
        files=(
            (
                "seq/window.py",
                "def last_n(xs, n):\n    if n <= 0:\n        return []\n"
                "    return xs[len(xs) - n + 1:]\n",
            ),
            ("seq/__init__.py", "from seq.window import last_n\n"),
            (
                "tests/test_window.py",
                "from seq import last_n\n\n\ndef test_last_two():\n"
                "    got = last_n([1, 2, 3, 4], 2)\n    assert got == [3, 4], got\n\n\n"
                "def test_zero():\n    assert last_n([1], 0) == [], last_n([1], 0)\n",
            ),
        ),
        fix_path="seq/window.py",
        fix_old="len(xs) - n + 1:",
        fix_new="len(xs) - n:",
    ),
)


def project(task_id: int) -> Project:
    return PROJECTS[task_id]

"""Writes the CPU demo's Harbor task set: small file, shell and Python tasks, each a Harbor task folder
(instruction.md, task.toml, environment/Dockerfile, tests/test.sh, solution/solve.sh), in ten families
of eight; six of each family go to train/, two to held_out/ (same skills, other files and words).

    python config/data/harbor_cpu/generate.py    # rewrites train/ and held_out/ beside this file

The folders are committed (they are the demo's dataset and an example of writing Harbor tasks);
tests/demo/test_harbor_task_set.py checks they are what this script writes. Every task is sized for a
135M model with one shell command: the point is a learning signal on 2 cores, not a benchmark.
"""

from __future__ import annotations

import random
import shutil
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PER_FAMILY, HELD_OUT_PER_FAMILY = 8, 2
WORDS = ["apple", "river", "stone", "cloud", "tiger", "maple", "piano", "ocean", "lemon", "candle",
         "rocket", "forest", "silver", "garden", "pepper", "window", "castle", "butter", "planet", "violet"]
BASE_IMAGE = "python:3.11-slim"  # map it to a local image where no registry is reachable (image_map)


@dataclass
class Task:
    name: str
    family: str
    instruction: str
    check: str  # bash that exits 0 when the agent's work is right
    solution: str  # bash that does the task
    files: dict[str, str] = field(default_factory=dict)  # put in /app by the image


def _rng(family: str, index: int) -> random.Random:
    return random.Random(f"{family}-{index}")


def write_word(i: int) -> Task:
    word = WORDS[i]
    return Task(f"write-word-{word}", "write_word",
                f"Create the file /app/answer.txt containing exactly the word `{word}`.",
                f'[ "$(tr -d "[:space:]" < /app/answer.txt)" = "{word}" ]',
                f"echo {word} > /app/answer.txt")


def make_dir(i: int) -> Task:
    name = WORDS[i + 4]
    return Task(f"make-dir-{name}", "make_dir", f"Create a directory named /app/{name}.",
                f"[ -d /app/{name} ]", f"mkdir -p /app/{name}")


def count_lines(i: int) -> Task:
    rng = _rng("count_lines", i)
    lines = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
    return Task(f"count-lines-{i}", "count_lines",
                "Count the lines of /app/data.txt and write the number to /app/answer.txt.",
                f'[ "$(tr -d "[:space:]" < /app/answer.txt)" = "{len(lines)}" ]',
                "wc -l < /app/data.txt > /app/answer.txt", {"data.txt": "\n".join(lines) + "\n"})


def upper_case(i: int) -> Task:
    rng = _rng("upper_case", i)
    text = " ".join(rng.choice(WORDS) for _ in range(4))
    return Task(f"upper-case-{i}", "upper_case",
                "Write the text of /app/input.txt in upper case to /app/output.txt.",
                f'[ "$(tr -d "\\n" < /app/output.txt)" = "{text.upper()}" ]',
                "tr a-z A-Z < /app/input.txt > /app/output.txt", {"input.txt": text + "\n"})


def copy_file(i: int) -> Task:
    source, target = WORDS[i], WORDS[19 - i]
    content = f"{WORDS[(i + 7) % 20]} {i}\n"
    return Task(f"copy-{source}-to-{target}", "copy_file", f"Copy the file /app/{source}.txt to /app/{target}.txt.",
                f"cmp -s /app/{source}.txt /app/{target}.txt && [ -s /app/{target}.txt ]",
                f"cp /app/{source}.txt /app/{target}.txt", {f"{source}.txt": content})


def sum_numbers(i: int) -> Task:
    rng = _rng("sum_numbers", i)
    numbers = [rng.randint(1, 50) for _ in range(rng.randint(2, 5))]
    return Task(f"sum-numbers-{i}", "sum_numbers",
                "/app/numbers.txt holds one integer per line. Write their sum to /app/answer.txt.",
                f'[ "$(tr -d "[:space:]" < /app/answer.txt)" = "{sum(numbers)}" ]',
                "awk '{s+=$1} END {print s}' /app/numbers.txt > /app/answer.txt",
                {"numbers.txt": "\n".join(map(str, numbers)) + "\n"})


def first_line(i: int) -> Task:
    rng = _rng("first_line", i)
    lines = rng.sample(WORDS, 4)
    return Task(f"first-line-{i}", "first_line", "Write the first line of /app/data.txt to /app/answer.txt.",
                f'[ "$(tr -d "[:space:]" < /app/answer.txt)" = "{lines[0]}" ]',
                "head -n 1 /app/data.txt > /app/answer.txt", {"data.txt": "\n".join(lines) + "\n"})


def sort_lines(i: int) -> Task:
    rng = _rng("sort_lines", i)
    words = rng.sample(WORDS, 5)
    expected = "\n".join(sorted(words))
    return Task(f"sort-lines-{i}", "sort_lines",
                "Sort the lines of /app/words.txt alphabetically and write them to /app/sorted.txt.",
                f'[ "$(cat /app/sorted.txt)" = "{expected}" ]',
                "sort /app/words.txt > /app/sorted.txt", {"words.txt": "\n".join(words) + "\n"})


def count_matches(i: int) -> Task:
    rng = _rng("count_matches", i)
    lines = [f"{rng.choice(['INFO', 'ERROR', 'WARN'])} {rng.choice(WORDS)}" for _ in range(rng.randint(4, 10))]
    lines[rng.randrange(len(lines))] = f"ERROR {rng.choice(WORDS)}"  # at least one
    errors = sum(line.startswith("ERROR") for line in lines)
    return Task(f"count-errors-{i}", "count_matches",
                "Count the lines of /app/log.txt that contain ERROR and write the number to /app/answer.txt.",
                f'[ "$(tr -d "[:space:]" < /app/answer.txt)" = "{errors}" ]',
                "grep -c ERROR /app/log.txt > /app/answer.txt", {"log.txt": "\n".join(lines) + "\n"})


def python_function(i: int) -> Task:
    k = i + 2
    return Task(f"python-times-{k}", "python_function",
                f"Write /app/solution.py defining a function `f(x)` that returns x multiplied by {k}.",
                f'cd /app && python3 -c "from solution import f; assert f(3) == {3 * k} and f(-1) == {-k}"',
                f"printf 'def f(x):\\n    return x * {k}\\n' > /app/solution.py")


FAMILIES: list[Callable[[int], Task]] = [write_word, make_dir, count_lines, upper_case, copy_file, sum_numbers,
                                         first_line, sort_lines, count_matches, python_function]


def tasks() -> Iterator[tuple[str, Task]]:
    for family in FAMILIES:
        for index in range(PER_FAMILY):
            yield ("held_out" if index >= PER_FAMILY - HELD_OUT_PER_FAMILY else "train"), family(index)


def _dockerfile(task: Task) -> str:
    lines = [f"FROM {BASE_IMAGE}", "WORKDIR /app"]
    lines += [f"COPY {name} /app/{name}" for name in sorted(task.files)]
    return "\n".join(lines) + "\n"


def _task_toml(task: Task) -> str:
    return textwrap.dedent(f"""\
        schema_version = "1.3"

        [task]
        name = "veri-demo/{task.name}"
        description = "A one-command shell task of veri's CPU demo ({task.family})."
        keywords = ["shell", "demo"]

        [metadata]
        family = "{task.family}"
        difficulty = "easy"

        [agent]
        timeout_sec = 60.0

        [verifier]
        timeout_sec = 30.0

        [environment]
        build_timeout_sec = 300.0
        cpus = 1
        memory_mb = 512
        storage_mb = 1024
        workdir = "/app"
        network_mode = "no-network"
        """)


def _test_sh(task: Task) -> str:
    return textwrap.dedent("""\
        #!/bin/bash
        # 1 when the agent's work is right, else 0 (Harbor's reward.txt).
        mkdir -p /logs/verifier
        if {check}; then
          echo 1 > /logs/verifier/reward.txt
        else
          echo 0 > /logs/verifier/reward.txt
        fi
        """).format(check=f"( {task.check} ) 2>/dev/null")


def write_task(folder: Path, task: Task) -> None:
    files = {"instruction.md": task.instruction + "\n", "task.toml": _task_toml(task),
             "environment/Dockerfile": _dockerfile(task), "tests/test.sh": _test_sh(task),
             "solution/solve.sh": f"#!/bin/bash\nset -e\n{task.solution}\n"}
    files |= {f"environment/{name}": content for name, content in task.files.items()}
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        if name.endswith(".sh"):
            path.chmod(0o755)


def write_all(into: Path) -> list[Path]:
    for split in ("train", "held_out"):
        shutil.rmtree(into / split, ignore_errors=True)
    written = []
    for split, task in tasks():
        written.append(into / split / task.name)
        write_task(written[-1], task)
    return written


if __name__ == "__main__":
    folders = write_all(HERE)
    print(f"wrote {len(folders)} tasks under {HERE}")

"""What a Harbor task's rollouts need before the first one starts, resolved once (at a command's or a job's
start): each task's image (`veri tasks build`, cached by its content hash), the verifier's tools
(/veri/tools, when vendored) and a bundle image's runtime tree (/veri/rt). Handed down as a plain mapping
{task folder (resolved): {"image", "tools_dir", "runtime_tree", "harness_command"}}, so the tiers below
import nothing from tools/."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from veri.services.launcher.task_runtime.runtime import harness_command, runtime_tree
from veri.services.launcher.task_runtime.verifier_tools import VerifierToolsError, verifier_tools
from veri.tools.tasks.build import build_tasks

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def prepare_tasks(tasks: list[Path], vendor: Path, *, image_map: dict[str, str] | None = None,
                  runtime_image: str | None = None, entrypoint: list[str] | None = None, client: Any = None,
                  log: Log = _stderr) -> dict[str, dict[str, Any]]:
    """Build every task's image (raises TaskBuildError naming each FROM that cannot be had offline), the
    verifier tools (None, with a warning, when nothing is vendored: a test.sh that installs nothing still
    runs) and runtime_image's runtime tree (None without one); `entrypoint`: the bundle's, rewritten to run
    from that tree."""
    tags = build_tasks(tasks, vendor, image_map=image_map, client=client, log=log)
    try:
        tools: str | None = str(verifier_tools(vendor))
    except VerifierToolsError as exc:
        log(f"tasks: no verifier tools ({exc}); test.sh runs with what the task's image has")
        tools = None
    tree = str(runtime_tree(runtime_image, client=client, log=log)) if runtime_image else None
    command = harness_command(entrypoint) if entrypoint else []
    return {str(task.resolve()): {"image": tag, "tools_dir": tools, "runtime_tree": tree, "harness_command": command}
            for task, tag in tags.items()}

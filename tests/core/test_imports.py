"""Core holds the schema and the contracts; what a job means to TRL and peft is the trainer's. Neither is
imported by any veri.core module, nor loaded when core checks a job (without the trainer's hook)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import veri.core

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = {"trl", "peft"}

# In a fresh interpreter, so this test's own imports do not count.
PROBE = """
import importlib, json, pathlib, pkgutil, sys
import veri.core
from veri.validation.run import check_config
for module in pkgutil.iter_modules(veri.core.__path__):
    importlib.import_module(f"veri.core.{module.name}")
check_config(pathlib.Path("config/url_extract_cpu.yaml"))  # a job with a grpo: section
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in ("trl", "peft"))))
"""


@pytest.mark.needs("process")
def test_core_loads_neither_trl_nor_peft():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True,
                            cwd=REPO)
    assert json.loads(result.stdout.splitlines()[-1]) == []


def test_no_core_module_imports_trl_or_peft():
    """Also the imports inside functions, which the probe above may not reach."""
    found = []
    for path in Path(veri.core.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {name}" for name in names if name.split(".")[0] in FORBIDDEN]
    assert found == []

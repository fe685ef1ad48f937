"""Every VERI_* variable the code names is declared in veri.core.envs (the one list of them).

Read where veri reads or sets variables: the string literals of services/ (docstrings left out: they
may name Python constants such as grpo's VERI_KNOBS), and the text of compose.yaml, the Makefile,
mk/*.mk and scripts/. A VERI_PROXY_<FIELD> or VERI_LAUNCHER_<FIELD> name counts as declared when
<field> is a field of the settings class that reads that prefix."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from veri.core import envs
from veri.services.launcher.settings import LauncherSettings
from veri.services.proxy.settings import ProxySettings

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bVERI_[A-Z0-9][A-Z0-9_]*")
DECLARED = {value for key, value in vars(envs).items() if key.isupper() and isinstance(value, str)}
PREFIXES = {envs.VERI_PROXY_PREFIX: ProxySettings, envs.VERI_LAUNCHER_PREFIX: LauncherSettings}


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = (node for node in ast.walk(tree)
             if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef))
    return {id(node.body[0].value) for node in nodes
            if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def python_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    return {name for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            for name in NAME.findall(node.value)}


def named_in_code() -> dict[str, set[str]]:
    """VERI_* name -> the files that name it."""
    found: dict[str, set[str]] = {}
    sources = [(path, python_names(path)) for path in (ROOT / "services").rglob("*.py")]
    texts = [ROOT / "compose.yaml", ROOT / "Makefile", *(ROOT / "mk").glob("*.mk"), *(ROOT / "scripts").rglob("*.sh")]
    sources += [(path, set(NAME.findall(path.read_text()))) for path in texts]
    for path, names in sources:
        for name in names:
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def is_declared(name: str) -> bool:
    if name in DECLARED:
        return True
    for prefix, settings in PREFIXES.items():
        if name.startswith(prefix) and name[len(prefix):].lower() in settings.model_fields:
            return True
    return False


def test_every_veri_variable_is_declared_in_envs():
    found = named_in_code()
    assert {"VERI_CONTROL_TOKEN", "VERI_PROXY_PORT", "VERI_POLICY_URLS"} <= set(found)  # the scan sees them
    missing = {name: sorted(files) for name, files in found.items() if not is_declared(name)}
    assert not missing, f"declare these in services/veri/core/envs.py (name = \"NAME\"  # meaning): {missing}"


def test_the_check_catches_an_undeclared_name(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Mentions VERI_IN_A_DOCSTRING."""\nX = os.environ.get("VERI_NOT_DECLARED")\n')
    assert python_names(module) == {"VERI_NOT_DECLARED"}
    assert not is_declared("VERI_NOT_DECLARED") and not is_declared("VERI_PROXY_NO_SUCH_FIELD")
    assert is_declared("VERI_PROXY_POLICY_URLS") and is_declared("VERI_LAUNCHER_BACKEND")

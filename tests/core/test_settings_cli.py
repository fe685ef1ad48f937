"""Settings declared once (infra/settings_cli.py): every ProxySettings / LauncherSettings field is a flag of
`veri serve proxy|launcher` and a VERI_PROXY_* / VERI_LAUNCHER_* variable; a flag wins; a refused value
names both. (The documented variables used to be read by nothing: the CLI restated every default.)"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from veri.infra.settings_cli import SettingsError, env_of, flag_of
from veri.services.launcher import cli as launcher_cli
from veri.services.launcher.settings import LauncherSettings
from veri.services.proxy import cli as proxy_cli
from veri.services.proxy.settings import ProxySettings

VERI = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "veri"


def parse_proxy(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    proxy_cli.register_serve(parser.add_subparsers())
    return parser.parse_args(["proxy", *argv])


@pytest.mark.parametrize(("settings", "module", "service"), [(ProxySettings, proxy_cli, "proxy"),
                                                             (LauncherSettings, launcher_cli, "launcher")])
def test_every_field_is_a_flag_whose_help_names_its_variable(settings, module, service, capsys):
    parser = argparse.ArgumentParser()
    module.register_serve(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args([service, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in settings.model_fields:
        if name in module.NOT_FLAGS:
            continue
        assert flag_of(name, module.FLAG_NAMES) in text, name
        assert "$" + env_of(settings, name) in text.replace("$ ", "$"), name


def test_a_variable_sets_a_proxy_knob_and_a_flag_wins(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("VERI_PROXY_MAX_TOKENS", "77")
    monkeypatch.setenv("VERI_PROXY_MODEL_DIR", str(tmp_path))
    monkeypatch.setenv("VERI_PROXY_POLICY_URLS", '["http://a:1", "http://b:1/"]')
    monkeypatch.setenv("VERI_PROXY_HOSTED_TOOLS", "refuse")
    monkeypatch.setenv("VERI_PROXY_PUBLIC_URL", "")  # compose's `${X:-}`: left alone
    from_env = proxy_cli.settings_from_args(parse_proxy([]))
    assert (from_env.max_tokens, from_env.model_dir, from_env.replica_urls) == (77, tmp_path, ["http://a:1", "http://b:1"])
    assert from_env.hosted_tools.value == "refuse" and from_env.public_url is None
    flagged = proxy_cli.settings_from_args(parse_proxy(["--max-tokens", "5", "--policy-url", "http://p:1",
                                                        "--no-record-requests", "--temperature", "0.5"]))
    assert (flagged.max_tokens, flagged.policy_url, flagged.policy_urls) == (5, "http://p:1", [])
    assert flagged.temperature == 0.5 and flagged.hosted_tools.value == "refuse"


def test_a_refused_value_names_the_flag_and_the_variable(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("VERI_PROXY_MODEL_DIR", raising=False)
    with pytest.raises(SettingsError, match=r"--max-tokens \(or \$VERI_PROXY_MAX_TOKENS\)"):
        proxy_cli.settings_from_args(parse_proxy(["--model", str(tmp_path), "--policy-url", "http://p:1",
                                                  "--max-tokens", "0"]))
    with pytest.raises(SettingsError, match=r"--model \(or \$VERI_PROXY_MODEL_DIR\): Field required"):
        proxy_cli.settings_from_args(parse_proxy(["--policy-url", "http://p:1"]))


@pytest.mark.needs("process")
def test_veri_serve_proxy_says_what_to_fix_and_exits_2(tmp_path: Path):
    done = subprocess.run([str(VERI), "serve", "proxy", "--policy-url", "http://127.0.0.1:1", "--model",
                           str(tmp_path), "--top-p", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "veri serve proxy: --top-p (or $VERI_PROXY_TOP_P): Input should be less than or equal to 1" in done.stderr

"""A job's `chat_template_kwargs` reach the proxy's rendering: `veri stack-env` exports them, compose
hands them to `veri serve proxy` ($VERI_PROXY_CHAT_TEMPLATE_KWARGS or --chat-template-kwargs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml
from transformers import AutoTokenizer

from veri.services.proxy.cli import register_serve, settings_from_args
from veri.services.proxy.rendering import ChatRendering
from veri.tools.appliance.stack_env import stack_env

MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register_serve(parser.add_subparsers())
    return parser.parse_args(["proxy", "--policy-url", "http://policy:8001", *argv])


def test_the_flag_and_the_variable_set_the_rendering(tiny_model: Path, tmp_path: Path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    expected = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, enable_thinking=False,
                                             tokenize=True, return_dict=False)
    default = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert expected != default  # the kwarg changes the prompt of this template

    monkeypatch.delenv("VERI_PROXY_CHAT_TEMPLATE_KWARGS", raising=False)
    flagged = settings_from_args(parse(["--model", str(tiny_model), "--store", str(tmp_path),
                                        "--chat-template-kwargs", '{"enable_thinking": false}']))
    assert list(ChatRendering(flagged).renderer.render_ids(MESSAGES, add_generation_prompt=True)) == expected
    assert settings_from_args(parse(["--model", str(tiny_model)])).chat_template_kwargs == {}

    monkeypatch.setenv("VERI_PROXY_CHAT_TEMPLATE_KWARGS", '{"enable_thinking": false}')
    assert settings_from_args(parse(["--model", str(tiny_model)])).chat_template_kwargs == {"enable_thinking": False}
    monkeypatch.setenv("VERI_PROXY_CHAT_TEMPLATE_KWARGS", "")  # compose's default: none
    assert settings_from_args(parse(["--model", str(tiny_model)])).chat_template_kwargs == {}


@pytest.mark.parametrize("bad", ["[1]", "{not json"])
def test_a_bad_value_is_refused_with_an_example(bad: str, capsys):
    with pytest.raises(SystemExit):
        parse(["--model", "m", "--chat-template-kwargs", bad])
    assert '{"enable_thinking": false}' in capsys.readouterr().err


def test_stack_env_exports_the_job_kwargs(tmp_path: Path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"model": "build/models/tiny", "backend": "hf", "dataset": {"path": "t.jsonl"},
                                   "harness_bundle": "b", "rewards": [{"source": "def reward(**k): return [0]"}],
                                   "chat_template_kwargs": {"enable_thinking": False}}))
    assert json.loads(stack_env(job)["VERI_CHAT_TEMPLATE_KWARGS"]) == {"enable_thinking": False}
    assert stack_env(Path(__file__).parents[2] / "config/url_extract_tiny.yaml")["VERI_CHAT_TEMPLATE_KWARGS"] == ""

"""The URL-extraction demo's reward functions (config/rewards/url_extract.py), loaded the way a job
loads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from veri.core.config import RewardConfig
from veri.loop.rewards import load_reward_functions

REPO = Path(__file__).resolve().parents[2]
REWARDS = REPO / "config/rewards/url_extract.py"
EXPECTED = "https://docs.acme.test/v2/start"
COLUMNS = ["prompt", "url", "expected_url", "label", "kind", "page"]


def score(function: str, completion, answer_txt: str | None = None, tmp_path: Path | None = None) -> float:
    [loaded] = load_reward_functions([RewardConfig(file=REWARDS, function=function)], COLUMNS)
    folder = None
    if answer_txt is not None:
        folder = tmp_path / "out"
        folder.mkdir()
        (folder / "answer.txt").write_text(answer_txt)
    [value] = loaded.func(prompts=["q"], completions=[completion], expected_url=[EXPECTED], outputs=[folder])
    return value


@pytest.mark.parametrize(("completion", "expected"), [
    ([{"role": "assistant", "content": f"ANSWER: {EXPECTED}"}], 1.0),
    ([{"role": "assistant", "content": f"It is <{EXPECTED}/>."}], 1.0),
    (f"ANSWER: {EXPECTED.upper()}", 1.0),
    ([{"role": "assistant", "content": "ANSWER: https://docs.acme.test/v2/stop"}], 0.0),
    # only the one answered URL counts: listing the page's links earns nothing
    ([{"role": "assistant", "content": f"Maybe https://acme.test/pricing or {EXPECTED}"}], 0.0),
    ([{"role": "assistant", "content": f"see https://acme.test/x\nANSWER: {EXPECTED}"}], 1.0),
    ([{"role": "assistant", "content": "no idea"}], 0.0),
])
def test_reward_scores_the_one_answer(completion, expected):
    assert score("reward", completion) == expected


def test_answer_txt_wins_over_the_reply(tmp_path):
    wrong = [{"role": "assistant", "content": "ANSWER: https://other.test/"}]
    assert score("reward", wrong, answer_txt=f"{EXPECTED}\n", tmp_path=tmp_path) == 1.0


def test_empty_answer_txt_falls_back_to_the_reply(tmp_path):
    assert score("reward", f"ANSWER: {EXPECTED}", answer_txt="", tmp_path=tmp_path) == 1.0


def test_closeness_is_partial_credit():
    exact = score("closeness", EXPECTED)
    near = score("closeness", "https://docs.acme.test/v3/start")
    far = score("closeness", "https://zzz.example/q")
    assert exact == 1.0 and 0.8 < near < 1.0 and far < near
    assert score("closeness", "no url here") == 0.0

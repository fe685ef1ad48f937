"""Weight syncs while 64 sessions are calling (docs/reliability.md): bench/reliability/scenarios/weight_sync.py's
check, CI-sized in calls (the scenario: 64 sessions x 20 calls, 5 syncs). Every version's weights are
distinct, so each span's logprobs tell which weights sampled it: that must be the version it carries."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.reliability.scenarios import weight_sync
from tests.proxy.test_load import _span

SESSIONS, CALLS, SYNCS = 64, 4, 2


@pytest.mark.needs("process")
def test_no_span_carries_another_version_than_the_weights_that_sampled_it(tiny_model: Path) -> None:
    found = weight_sync.check(tiny_model, sessions=SESSIONS, calls=CALLS, syncs=SYNCS)
    assert found["problems"] == []
    assert (found["spans_lost"], found["5xx"]) == (0, 0)
    print(found["notes"])


def test_the_versions_logprobs_tell_them_apart(tiny_model: Path, tmp_path: Path) -> None:
    """The attribution itself: a completion scored under version 1 is attributed to 1, and stamped 0 it is
    named as misattributed (the check is not blind to a wrong stamp)."""
    scorer = weight_sync.VersionScorer(tiny_model, weight_sync.write_versions(tiny_model, tmp_path, 1))
    span = _span(0, version=0)
    span.prompt_token_ids, span.completion_token_ids = [5, 6, 7, 8], [9, 10, 11]
    ids = [span.prompt_token_ids + span.completion_token_ids]
    with torch.no_grad():
        logits = scorer.models[1](input_ids=torch.tensor(ids)).logits[0, 3:-1]
    span.completion_logprobs = torch.log_softmax(logits, -1)[torch.arange(3), torch.tensor([9, 10, 11])].tolist()
    gaps = scorer.distances(span)
    assert gaps[1] < weight_sync.MATCH_TOLERANCE < gaps[0]
    problems, served = weight_sync.attribution_problems(scorer, [span])
    assert served == {0: 0, 1: 1} and problems == ["r#0: sampled by version 1, stamped 0"]

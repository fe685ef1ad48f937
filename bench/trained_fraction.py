"""The fraction of sampled tokens veri trains, per demo bundle (target: 100%, each token exactly once).

    python bench/trained_fraction.py --model build/models/tiny [NAME ...]      (make bench-branches)

Runs every demo the replay recordings are made from, live and unmodified (testkit/record_demos.py:
the OpenAI-SDK, Claude Code, Codex and inline bundles, Claude Code handing its task to a sub-agent, the
Anthropic SDK's and the Responses API's tool loops, the Anthropic SDK's loop compacting its history)
against the scripted tiny-model policy behind a capture proxy, and prints, from each rollout's spans and
episode, what `veri debug` prints as `tokens: sampled S, trained T, dropped D`: the rows the rollout
became (their kinds), the sampled tokens, the trained ones, and the fraction. A token counts as trained
when it is in exactly one row with env_mask 1; exits 1 when any demo trains less (or more) than every
sampled token once.
Needs `make tiny-model`, `make claude-code` and `make codex`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testkit.record_demos import BENCH_ONLY, demo_recordings
from veri.core.token_account import sampled_tokens, token_account
from veri.tools.replay.recording import Recording

HARNESS = {
    "url_extract_openai": "OpenAI SDK (chat completions tool loop)",
    "url_extract_claude": "Claude Code 2.1.332 (Bash tool)",
    "claude_sub_agent": "Claude Code 2.1.332 (Agent tool: a sub-agent)",
    "url_extract_codex": "Codex 0.169.0 (Responses, SSE)",
    "url_extract_inline": "inline (one chat call, no tool)",
    "anthropic_sdk": "Anthropic SDK (Messages tool loop)",
    "anthropic_compaction": "Anthropic SDK compacting its history",
    "openai_responses": "OpenAI SDK (Responses, previous_response_id)",
}


def trained_once(recording: Recording) -> int:
    """Sampled tokens that are in exactly one row, trained there: each span's completion must be the
    trained tokens of the one row its span is in (what the account's sum alone cannot tell)."""
    spans = {span.request_index: span for span in recording.spans}
    episode = recording.episode
    chains = [(episode.chain, episode.row), *((branch.spans, branch.row) for branch in episode.branches)]
    seen = Counter(index for indices, _ in chains for index in indices)
    once = 0
    for indices, row in chains:
        if row is None:
            continue
        trained = [token for token, mask in zip(row.completion_ids, row.env_mask, strict=True) if mask]
        expected = [token for index in indices for token in spans[index].completion_token_ids]
        if trained == expected:
            once += sum(len(spans[index].completion_token_ids) for index in indices if seen[index] == 1)
    return once


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("build/models/tiny"))
    parser.add_argument("names", nargs="*", help="which demos (default: all)")
    args = parser.parse_args()
    os.environ.setdefault("VERI_TINY_MODEL", str(args.model.resolve()))
    names = args.names or [*HARNESS]
    print(f"{'demo':<20} {'harness':<46} {'calls':>5}  {'rows':<34} {'sampled':>7} {'trained':>7} {'fraction':>8}")
    short = []
    for name, recording in demo_recordings(names, args.model.resolve()):
        episode = recording.episode
        sampled = {s.request_index: sampled_tokens(s.completion_token_ids, s.response) for s in recording.spans}
        account = token_account(episode, sampled, episode.verdicts, trainable=not episode.rejected)
        once = trained_once(recording)
        fraction = once / account.sampled if account.sampled else 1.0
        if once != account.sampled or account.trained != account.sampled:
            short.append(f"{name}: {account.line()}, {once} trained exactly once")
        rows = ", ".join(f"{kind} {count}" for kind, count in Counter(
            [episode.chain_kind.value] + [branch.kind.value for branch in episode.branches]).items())
        print(f"{name:<20} {HARNESS.get(name, ''):<46} {len(recording.spans):>5}  {rows:<34} {account.sampled:>7}"
              f" {once:>7} {fraction:>8.1%}", flush=True)
    for line in short:
        print(f"not every sampled token trained once: {line}", file=sys.stderr)
    return 1 if short else 0


assert set(BENCH_ONLY) <= set(HARNESS)

if __name__ == "__main__":
    sys.exit(main())

"""Test-only reward: a fixed score of the sampled token ids (0..1). Two free samples of one task score
differently (almost surely), so their group has non-zero advantages; teacher-forced rollouts of one
task score the same."""


def sampled_tokens(prompts, completions, completion_ids, **kwargs):
    return [(sum(ids) % 997) / 997 for ids in completion_ids]

def reward(prompts, completions, **kwargs):
    return [0.0 for _ in completions]

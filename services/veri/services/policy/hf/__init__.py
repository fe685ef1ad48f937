"""The embedded CPU (`hf`) policy backend: transformers behind vLLM's token-in/token-out API subset.

Modules, one job each:

- `settings.py`  the server's typed settings (built from `veri serve policy` flags)
- `loader.py`    model + tokenizer + generation config -> `LoadedModel`
- `sampler.py`   one sampling step for a batch of rows (temperature, top-p, seeds, logprobs)
- `engine.py`    `DecodeBatch`: left-padded prefill, KV-cached decode, rows join and leave between steps
- `batcher.py`   the engine thread: collects requests, admits them between decode steps, applies weights
- `weights.py`   reads and validates a safetensors update against the live model
- `serving.py`   `/v1/completions` request -> rows -> `CompletionResponse`
- `errors.py`    the exception tree and the OpenAI error shape
- `server.py`    FastAPI routes, `create_app(settings)`, `serve(...)`
"""

"""The vLLM policy backend: `vllm serve` itself (started by compose from the job's plan), plus veri's
worker extension for the `filesystem` weight sync (`worker`)."""

# `vllm serve --worker-extension-cls` for the filesystem weight sync (its methods: `worker`).
WORKER_EXTENSION = "veri.services.policy.vllm.worker.WeightReloadExtension"

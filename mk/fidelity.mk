# Does the trainer score what the policy sampled? Per backend (hf; the vLLM CPU twin when
# $(IMAGE_PREFIX)/vllm-cpu exists), on the CPU demo's model and job: the trainer-vs-sampler logprob
# difference at equal weights and the importance ratio at staleness 0 and 1 (bench/sampling_fidelity.py;
# figures: docs/benchmarks.md). Builds build/models/smollm2 when missing. ~6 min on 2 cores.
#   make bench-fidelity

.PHONY: bench-fidelity

bench-fidelity: venv ## trainer-vs-sampler logprobs and the importance ratio per backend at staleness 0 and 1 (figures: docs/benchmarks.md)
	IMAGE_PREFIX=$(IMAGE_PREFIX) $(BIN)/python bench/sampling_fidelity.py --model build/models/smollm2

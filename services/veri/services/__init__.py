"""The deployables, one container each: proxy/ (capture), policy/ (hf server, vLLM glue), launcher/ (sandboxes),
console/, egress/ (the sandboxes' way out), webfixture/ (the demo's web), trainer/ (the loop). The first six
import none of each other; they meet in core/ and infra/."""

#!/bin/sh
# `codex exec` on the task's prompt with Codex's defaults: the config only makes the rollout's
# endpoint its provider (CODEX_HOME is ~/.codex, a fresh HOME per rollout).
set -eu
mkdir -p "$HOME/.codex"
cat >"$HOME/.codex/config.toml" <<CONFIG
model = "$VERI_POLICY_MODEL"
model_provider = "veri"

[model_providers.veri]
name = "veri capture proxy"
base_url = "$OPENAI_BASE_URL"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
CONFIG
prompt=$(python -c 'import json, os; print(json.loads(os.environ["VERI_TASK_INPUT"]))')
cd "$(mktemp -d)"
exec codex exec --skip-git-repo-check "$prompt"

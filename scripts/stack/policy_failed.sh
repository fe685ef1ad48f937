#!/usr/bin/env bash
# policy_failed.sh PROJECT STATE_DIR — after `compose up` failed: each policy server (policy, policy-1,
# ...) of the project that is not healthy gets its whole log saved to STATE_DIR/logs/<service>.log and
# its last lines shown, with that file's name. up.sh calls it, so `make train` ends with what vLLM said
# (out of memory, a driver too old, a model folder it cannot read) instead of compose's "unhealthy".
# Exit 0 when it found one to report, 1 when every policy server was healthy (the failure was elsewhere).
set -uo pipefail
project=$1 state=$2
LINES=${POLICY_LOG_LINES:-30}
found=1
for id in $(docker ps -aq --filter "label=com.docker.compose.project=$project"); do
  service=$(docker inspect -f '{{index .Config.Labels "com.docker.compose.service"}}' "$id" 2>/dev/null)
  [[ $service =~ ^policy(-[0-9]+)?$ ]] || continue
  status=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id")
  [ "$status" = healthy ] && continue
  exit_code=$(docker inspect -f '{{.State.ExitCode}}' "$id")
  running=$(docker inspect -f '{{.State.Running}}' "$id")
  mkdir -p "$state/logs"
  log=$state/logs/$service.log
  docker logs "$id" >"$log" 2>&1
  what=$([ "$running" = true ] && echo "$status" || echo "exited with code $exit_code")
  echo "make train: the policy server '$service' did not become healthy ($what); the last $LINES lines of its log:" >&2
  tail -n "$LINES" "$log" | sed 's/^/  | /' >&2
  echo "make train: its whole log: $log (a vLLM server's health check waits the start period in" \
    "$state/compose.policy.yaml;" \
    "a model this size may need more GPUs or a smaller max_model_len: veri doctor and veri validate say)" >&2
  found=0
done
exit $found

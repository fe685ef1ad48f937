#!/usr/bin/env bash
# `make test` (what CI runs), in passes that overlap the set-up with the tests (docs/development.md,
# "Where CI's minutes go"):
#   1. `make test-prepared` starts in the background: what only the docker and browser tiers need (the
#      images, veri/vllm-cpu, Chromium, the registry, the Claude Code and Codex CLIs), mostly downloads
#      and image layers, log in build/test-prepared.log, at nice 10 so the tests come first (the
#      Kubernetes build, started by make, is niced too). Meanwhile pytest runs the tiers that need only
#      the venv and the tiny model (unit, service, process: tests/tiers.py).
#   2. Once that is ready (a failure there stops the run with its log's tail), pytest runs the rest:
#      sandbox, stack, vllm, kubernetes, browser.
#   3. The compose_smoke stack tests again under Compose v2 (make test-compose-v2).
# Each pass fails the run on its own; every pass runs even when an earlier one failed, so one run shows
# every failure. Env from the Makefile: BIN, VERI_TINY_MODEL, VERI_CLAUDE_BIN, VERI_CODEX_BIN.
set -uo pipefail
cd "$(dirname "$0")/../.."
say() { printf 'make test: [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }  # time since make test's passes began
LOG=build/test-prepared.log
IN_PROCESS="unit or service or process"

mkdir -p build
{ nice -n 10 make --no-print-directory test-prepared; rc=$?
  echo "test-prepared: ended ${SECONDS}s after make test's passes began, exit $rc"; exit $rc; } >"$LOG" 2>&1 &
prepared=$!
trap 'pkill -P $prepared 2>/dev/null; kill $prepared 2>/dev/null' EXIT  # make, then its subshell
say "images, Chromium, the registry and the CLIs in the background ($LOG); first the tiers that need none of them"

status=0
"$BIN/pytest" -q -rs --durations=25 -m "$IN_PROCESS" || status=1

say "waiting for the background set-up ($LOG)"
if ! wait $prepared; then
  tail -40 "$LOG"
  say "the set-up above failed, so the docker and browser tiers cannot run (rerun: make test-prepared)"
  exit 1
fi
trap - EXIT
say "$(tail -1 "$LOG")"
say "then the docker, stack, vLLM, Kubernetes and browser tiers"
"$BIN/pytest" -q -rs --durations=25 -m "not ($IN_PROCESS)" || status=1

say "then the Compose v2 smoke pass"
make --no-print-directory test-compose-v2 || status=1
say "done ($([ $status = 0 ] && echo passed || echo failed))"
exit $status

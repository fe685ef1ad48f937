#!/usr/bin/env bash
# `make test` (what CI runs), in passes that overlap the set-up with the tests (docs/development.md,
# "Where CI's minutes go"):
#   1. `make test-prepared` starts in the background: what only the docker and browser tiers need (the
#      images, veri/vllm-cpu, Chromium, the registry, the Claude Code and Codex CLIs), mostly downloads
#      and image layers, log in build/test-prepared.log, at nice 10 so the tests come first (the
#      Kubernetes build, started by make, is niced too). Meanwhile pytest runs the tiers that need only
#      the venv and the tiny model (unit, service, process: tests/tiers.py).
#   2. As soon as that set-up is ready (a failure there stops the run with its log's tail), pytest runs the
#      rest beside pass 1: sandbox, stack, vllm, kubernetes, browser. Pass 1 keeps mostly one core busy and
#      pass 2 mostly waits on containers, so together they fill the two; the tiers share nothing (pass 1
#      uses no Docker). Pass 2's output (build/test-pass2.log) is shown once pass 1's is done, live from
#      there, so each pass reads whole.
#   3. The compose_smoke stack tests again under Compose v2 (make test-compose-v2).
# Each pass fails the run on its own; every pass runs even when an earlier one failed, so one run shows
# every failure. Env from the Makefile: BIN, VERI_TINY_MODEL, VERI_CLAUDE_BIN, VERI_CODEX_BIN.
set -uo pipefail
cd "$(dirname "$0")/../.."
say() { printf 'make test: [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }  # time since make test's passes began
LOG=build/test-prepared.log
IN_PROCESS="unit or service or process"

PASS2_LOG=build/test-pass2.log PASS2_RC=build/test-pass2.rc

mkdir -p build
rm -f "$PASS2_LOG" "$PASS2_RC"
{ ( nice -n 10 make --no-print-directory test-prepared; rc=$?
    echo "test-prepared: ended ${SECONDS}s after make test's passes began, exit $rc"; exit $rc ) >"$LOG" 2>&1 || exit 1
  echo "pass 2 began ${SECONDS}s after make test's passes began" >"$PASS2_LOG"
  "$BIN/pytest" -q -rs --durations=25 -m "not ($IN_PROCESS)" >>"$PASS2_LOG" 2>&1
  echo $? >"$PASS2_RC"
} &
background=$!
# On an early exit, pass 2's pytest ends by SIGINT, so its teardown stops its stacks: a Ctrl-C reached it with
# the terminal's process group (it shares this script's); any other end sends it one. Then the set-up's make.
interrupted=
stop_background() {
  if [ -e "$PASS2_LOG" ] && { [ -n "$interrupted" ] || pkill -INT -P $background 2>/dev/null; }; then
    wait $background 2>/dev/null
  fi
  pkill -P $background 2>/dev/null; kill $background 2>/dev/null
}
trap stop_background EXIT
trap 'interrupted=1; exit 130' INT
say "images, Chromium, the registry and the CLIs in the background ($LOG), then the docker, stack, vLLM," \
  "Kubernetes and browser tiers ($PASS2_LOG); first the tiers that need none of them"

status=0
"$BIN/pytest" -q -rs --durations=25 -m "$IN_PROCESS" || status=1

if [ ! -e "$PASS2_LOG" ] && kill -0 $background 2>/dev/null; then
  say "waiting for the background set-up ($LOG)"
  while [ ! -e "$PASS2_LOG" ] && kill -0 $background 2>/dev/null; do sleep 2; done
fi
if [ ! -e "$PASS2_LOG" ]; then
  tail -40 "$LOG"
  say "the set-up above failed, so the docker and browser tiers cannot run (rerun: make test-prepared)"
  exit 1
fi
say "$(tail -1 "$LOG")"
say "the docker, stack, vLLM, Kubernetes and browser tiers ($(head -1 "$PASS2_LOG")):"
tail -n +2 -f --pid=$background "$PASS2_LOG"
wait $background
trap - EXIT INT
[ "$(cat "$PASS2_RC" 2>/dev/null)" = 0 ] || status=1

say "then the Compose v2 smoke pass"
make --no-print-directory test-compose-v2 || status=1
say "done ($([ $status = 0 ] && echo passed || echo failed))"
exit $status

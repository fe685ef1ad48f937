#!/bin/bash
# 1 when the agent's work is right, else 0 (Harbor's reward.txt).
mkdir -p /logs/verifier
if ( cmp -s /app/stone.txt /app/butter.txt && [ -s /app/butter.txt ] ) 2>/dev/null; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi

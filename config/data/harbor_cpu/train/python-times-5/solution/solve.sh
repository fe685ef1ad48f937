#!/bin/bash
set -e
printf 'def f(x):\n    return x * 5\n' > /app/solution.py

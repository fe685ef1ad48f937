#!/bin/bash
set -e
printf 'def f(x):\n    return x * 4\n' > /app/solution.py

#!/bin/bash
set -e
printf 'def f(x):\n    return x * 8\n' > /app/solution.py

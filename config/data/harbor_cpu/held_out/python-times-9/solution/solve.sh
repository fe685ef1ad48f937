#!/bin/bash
set -e
printf 'def f(x):\n    return x * 9\n' > /app/solution.py

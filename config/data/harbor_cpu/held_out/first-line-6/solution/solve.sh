#!/bin/bash
set -e
head -n 1 /app/data.txt > /app/answer.txt

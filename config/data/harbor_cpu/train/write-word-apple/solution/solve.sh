#!/bin/bash
set -e
echo apple > /app/answer.txt

#!/bin/bash
set -e
echo ocean > /app/answer.txt

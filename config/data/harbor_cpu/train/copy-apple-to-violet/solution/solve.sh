#!/bin/bash
set -e
cp /app/apple.txt /app/violet.txt

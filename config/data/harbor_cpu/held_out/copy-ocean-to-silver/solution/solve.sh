#!/bin/bash
set -e
cp /app/ocean.txt /app/silver.txt

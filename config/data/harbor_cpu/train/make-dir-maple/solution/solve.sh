#!/bin/bash
set -e
mkdir -p /app/maple

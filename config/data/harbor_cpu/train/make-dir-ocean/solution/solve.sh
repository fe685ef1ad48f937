#!/bin/bash
set -e
mkdir -p /app/ocean

#!/bin/bash
set -e
cp /app/piano.txt /app/garden.txt

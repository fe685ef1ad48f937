#!/bin/bash
set -e
cp /app/river.txt /app/planet.txt

#!/bin/bash
set -e
cp /app/tiger.txt /app/window.txt

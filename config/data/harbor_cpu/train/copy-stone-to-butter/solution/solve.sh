#!/bin/bash
set -e
cp /app/stone.txt /app/butter.txt

#!/bin/bash
set -e
cp /app/cloud.txt /app/castle.txt

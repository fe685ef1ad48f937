#!/bin/bash
set -e
cp /app/maple.txt /app/pepper.txt

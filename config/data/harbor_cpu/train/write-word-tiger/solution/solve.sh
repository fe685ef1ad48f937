#!/bin/bash
set -e
echo tiger > /app/answer.txt

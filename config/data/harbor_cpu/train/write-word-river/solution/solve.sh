#!/bin/bash
set -e
echo river > /app/answer.txt

# A task environment as task authors write them (apt-get + pip), for the offline build experiment.
FROM ubuntu:24.04
RUN apt-get update && apt-get install -y \
    curl \
    python3 \
    python3-pip \
    jq \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --break-system-packages requests==2.32.3
WORKDIR /app

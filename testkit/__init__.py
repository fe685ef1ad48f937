"""Helpers the tests and the benchmarks share (bench/ imports nothing from tests/): real veri servers
started the way a user starts them (servers.py), span and archive builders, the Kubernetes test cluster,
the trainer tests' job."""

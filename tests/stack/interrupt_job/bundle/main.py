"""A harness that never ends on its own: the interrupt tests stop `veri train` while it runs."""
import time

print("sleeping", flush=True)
time.sleep(600)

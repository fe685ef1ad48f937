"""Commands around the loop: appliance/ (stack-env, doctor, layout, job: the Makefile calls them), harness/
(bundle images, run-harness, debug), export/ (SFT datasets), replay/ (record and replay), models/ (the test and demo
models)."""

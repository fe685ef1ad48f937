"""Commands around the loop: appliance/ (what make asks veri), harness/ (bundle images, run-harness, debug),
export/ (SFT datasets), replay/ (record and replay), models/ (the test and demo models)."""

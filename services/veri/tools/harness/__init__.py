"""Harness bundles: `veri harness build DIR` turns a bundle folder into its image (deps installed once,
at build time). The manifest and the per-rollout contract live in `veri.core.harness`."""

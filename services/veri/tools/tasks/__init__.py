"""Harbor task environments offline: `veri tasks vendor` (online, once), `veri tasks build` (offline, through
a build proxy), the runtime tree a bundle runs from inside any task image, and the verifier's tools.
The design: docs/design/harbor-tasks.md §3.1, §3.3, §3.4."""

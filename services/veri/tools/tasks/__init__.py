"""Harbor tasks: `veri tasks check PATH...` (what veri can run, what it refuses, what test.sh cannot get
offline); `veri tasks vendor` (online, once) and `veri tasks build` (offline, through a build proxy); the
runtime tree a bundle runs from inside any task image, and the verifier's tools. The task format itself
(task.toml's schema, reading, refusals) lives in `veri.core.harbor_task`. The design:
docs/design/harbor-tasks.md §3.1, §3.3, §3.4."""

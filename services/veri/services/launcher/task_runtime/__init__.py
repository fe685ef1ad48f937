"""What a Harbor task's sandbox mounts beside the task's image (docs/design/harbor-tasks.md §3): the bundle's
runtime tree at /veri/rt (runtime.py), the verifier's offline tools at /veri/tools (verifier_tools.py), and
where the vendored inputs and built trees live (layout.py). The launcher owns them; `veri tasks` and the
training loop's job start build them through here."""

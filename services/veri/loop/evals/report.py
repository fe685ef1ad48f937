"""What `veri eval` prints: an eval's table per reward function and per task, and two evals side by side."""

from __future__ import annotations

from typing import Any

from veri.loop.evals.summary import label

MAX_TASK_ROWS = 50  # the per-task table is cut here on the terminal (--json and eval.json have every task)


def eval_text(summary: dict[str, Any]) -> str:
    names, k = summary["functions"], summary["k"]
    lines = [f"eval {summary['name']}: {summary['checkpoint']} ({summary['weights']}), {len(summary['tasks'])} tasks"
             f" x {summary['samples_per_task']} samples, temperature {summary['temperature']:g};"
             f" a sample passes at >= {summary['pass_threshold']:g}"]
    ks = sorted({1, k})
    header = f"  {'function':<20} {'mean':>7}  {'95% CI':<17}" + "".join(f" {'pass@' + str(size):>8}" for size in ks)
    lines.append(header)
    for name in names:
        mean, ci = summary["reward_mean"][name], summary["reward_ci"][name]
        interval = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"
        passes = "".join(f" {_num(summary['pass_at_k'][name].get(str(size))):>8}" for size in ks)
        lines.append(f"  {label(name):<20} {_num(mean):>7}  {interval:<17}{passes}")
    lines.append(f"  {summary['scored']} of {summary['rollouts']} rollouts scored"
                 + (f"; rejected (left out): {', '.join(f'{r} {n}' for r, n in summary['rejected'].items())}"
                    if summary["rejected"] else ""))
    lines.append("  " + f"{'task':>6} {'scored':>7}" + "".join(f" {label(name)[:14]:>14}" for name in names))
    for row in summary["tasks"][:MAX_TASK_ROWS]:
        lines.append("  " + f"{row['task_index']:>6} {row['scored']:>3}/{row['samples']:<3}"
                     + "".join(f" {_num(row['mean'][name]):>14}" for name in names))
    if len(summary["tasks"]) > MAX_TASK_ROWS:
        lines.append(f"  ... {len(summary['tasks']) - MAX_TASK_ROWS} more tasks (--json, or eval.json in the archive)")
    if summary.get("verifier"):
        lines += verifier_text(summary["verifier"], ks)
    lines.append(f"archive: {summary['archive']} (the console lists it as {summary['name']};"
                 f" veri debug {summary['archive']}/trajectories/step-0/task-N/rollout-K.json)")
    return "\n".join(lines)


def verifier_text(table: dict[str, Any], ks: list[int]) -> list[str]:
    """The Harbor tasks' own figures: the verifier's reward per task (comparable with Harbor's pass rate)."""
    failed = ", ".join(f"{kind} {n}" for kind, n in table["failed"].items())
    lines = [f"verifier (the tasks' tests): {table['verified']} of {table['rollouts']} rollouts verified"
             + (f"; could not run: {failed}" if failed else ""),
             f"  mean {_num(table['mean'])}, failed as 0 {_num(table['mean_failed_as_0'])} (Harbor's pass rate)"
             + "".join(f", pass@{size} {_num(table['pass_at_k'].get(str(size)))}" for size in ks),
             f"  {'task':>6} {'name':<24} {'verified':>9} {'mean':>7} {'as 0':>7}"
             + "".join(f" {'pass@' + str(size):>8}" for size in ks)]
    for row in table["tasks"][:MAX_TASK_ROWS]:
        name = str(row["task_name"] or "-")[:24]
        lines.append(f"  {row['task_index']:>6} {name:<24} {row['verified']:>4}/{row['samples']:<4}"
                     f" {_num(row['mean']):>7} {_num(row['mean_failed_as_0']):>7}"
                     + "".join(f" {_num(row['pass_at_k'].get(str(size))):>8}" for size in ks))
    return lines


def compare_text(result: dict[str, Any]) -> str:
    lines = [f"A = {result['a']}", f"B = {result['b']}",
             f"  {'function':<20} {'tasks':>5} {'A':>7} {'B':>7} {'B - A':>8}  {'95% CI':<19} {'p':>6}"]
    for name, row in result["functions"].items():
        low, high = row["difference_ci"]
        lines.append(f"  {label(name):<20} {row['tasks']:>5} {row['mean_a']:>7.3f} {row['mean_b']:>7.3f}"
                     f" {row['difference']:>+8.3f}  [{low:+.3f}, {high:+.3f}]  {row['p_value']:>6.3f}")
    lines.append("  paired over the tasks both scored: per-task means, a sign-flip permutation test (p) and a"
                 " task bootstrap interval of B - A")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"

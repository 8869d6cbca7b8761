"""The tables of ``bench_torch.py``: each run's figures as ratios to ``sync`` without a straggler (:func:`show`),
and the race to the target validation accuracy against the fastest torch variant (:func:`race_rows`,
:func:`show_race`, kept in the JSON record as ``RACE_COLUMNS`` with ``RACE_NOTE``)."""

from __future__ import annotations

__all__ = ["RACE_COLUMNS", "RACE_NOTE", "fit_overheads", "race_rows", "show", "show_race"]


def show(results: list[dict]) -> None:
    base = next((r for r in results if r["mode"] == "sync" and r["straggler"] == 1.0), results[0])

    def after(r: dict, key: str) -> float | None:  # seconds from fine-tuning's start
        return None if r[key] is None else r[key] - r["pretrain_s"]

    def ratio(value, reference) -> str:
        return "-" if value is None or not reference else f"{value / reference:.2f}"

    def fmt(value, pattern: str = "{:.1f}") -> str:
        return "-" if value is None else pattern.format(value)

    def kilobytes(value: float | None) -> float | None:
        return None if value is None else value / 1e3

    print(f"\nratios (/x) against {base['mode']} without a straggler; 'before ft': the DBN's pretraining, "
          "torch's process start; 'ft': from fine-tuning's start; 'ft/unslowed': fine-tuning time against the "
          "same system's without a straggler")
    print(f"{'system':13} {'slow':>4} {'wall s':>7} {'wall/x':>6} {'before ft s':>11} {'ft s':>6} {'ft/x':>5} "
          f"{'target s':>8} {'target/x':>8} {'ft>target s':>11} {'ft>target/x':>11} {'acc':>6} {'lr x':>5} "
          f"{'kB/node/ft epoch':>16} {'ft/unslowed':>11}")
    for r in results:
        unslowed = next((u for u in results if u["mode"] == r["mode"] and u["straggler"] == 1.0), None)
        print(f"{r['mode']:13} {r['straggler']:>4g} {r['wall_s']:7.1f} {ratio(r['wall_s'], base['wall_s']):>6} "
              f"{r['pretrain_s']:11.1f} {after(r, 'wall_s'):6.1f} {ratio(after(r, 'wall_s'), after(base, 'wall_s')):>5} "
              f"{fmt(r['target_s']):>8} {ratio(r['target_s'], base['target_s']):>8} {fmt(after(r, 'target_s')):>11} "
              f"{ratio(after(r, 'target_s'), after(base, 'target_s')):>11} {r['accuracy']:6.3f} "
              f"{fmt(r['finetune_scale'], '{:.2f}'):>5} {fmt(kilobytes(r['finetune_sent_per_node_epoch'])):>16} "
              f"{ratio(after(r, 'wall_s'), unslowed and after(unslowed, 'wall_s')):>11}")
    for r in results:
        if r["target_s"] is None and "best_val_accuracy" in r:
            print(f"{r['mode']} straggler x{r['straggler']:g} never reached the target: best validation accuracy "
                  f"{r['best_val_accuracy']:.3f}")


RACE_COLUMNS = ["run", "system", "s to target", "x torch", "whole fit s", "start-up s", "validation s",
                "test accuracy"]
RACE_NOTE = ("s to target: from the fit's start (sparkdbn: Trainer.fit called, the session already up; torch: "
             "before TorchDistributor.run, its process start included) to the end of the first epoch whose "
             "validation accuracy reached the target. x torch: against the same run's fastest torch variant to the "
             "target (the DBN's torch-ddp never reaches it: torch-ddp+pre, its pretraining included). Start-up: "
             "sparkdbn's driver steps before the first training job (data check, storing the partitions, run "
             "record); torch's process start and process-group set-up. Validation: sparkdbn's validation steps, "
             "summed (torch's rank 0 validates in its epoch). Runs in turn in one process; the machine is shared, "
             "so compare within a run.")


def race_rows(results: list[dict]) -> list[list]:
    """Each run's time to the target, as a ratio to the same repeat's fastest torch variant to the target
    (no straggler only)."""
    rows = []
    for r in (r for r in results if r["straggler"] == 1.0):
        reached = [t["target_s"] for t in results if t["mode"].startswith("torch") and t["straggler"] == 1.0
                   and t["repeat"] == r["repeat"] and t["target_s"] is not None]
        reference = min(reached, default=None)
        startup, validation = fit_overheads(r)
        rows.append([r["repeat"], r["mode"], r["target_s"],
                     None if r["target_s"] is None or not reference else r["target_s"] / reference, r["wall_s"],
                     startup, validation, r["accuracy"]])
    return rows


def fit_overheads(result: dict) -> tuple[float | None, float | None]:
    """``(start-up s, validation s)`` of a run: sparkdbn's from its fit's timings (start-up: until its first
    training job; validation: its epochs' validations); torch's process start and set-up, and None."""
    timings = result.get("timings")
    if not timings:
        return result["pretrain_s"], None
    steps = timings["steps"]
    first_epoch = next((s for s in steps if " epoch" in s["name"] and not s["name"].endswith("validation")), None)
    startup = first_epoch["start_s"] if first_epoch else None
    return startup, sum(s["seconds"] for s in steps if s["name"].endswith("validation"))


def show_race(rows: list[list], target: float) -> None:
    def fmt(value, pattern: str = "{:.1f}") -> str:
        return "-" if value is None else pattern.format(value)

    print(f"\ntime to {target} held-out, each run against its fastest torch variant to the target")
    print(f"{'run':>3} {'system':13} {'to target s':>11} {'x torch':>7} {'fit s':>6} {'start-up s':>10} "
          f"{'validation s':>12} {'acc':>6}")
    for run, system, target_s, ratio, wall, startup, validation, accuracy in rows:
        print(f"{run:>3} {system:13} {fmt(target_s):>11} {fmt(ratio, '{:.2f}'):>7} {wall:6.1f} {fmt(startup):>10} "
              f"{fmt(validation):>12} {accuracy:6.3f}")

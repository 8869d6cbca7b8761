"""scripts/bench_gpu.py runs its CPU rows anywhere (the GPU rows need cupy and a GPU, torch's need torch)."""

from support.scripts import script_module


def test_the_gpu_benchmark_runs_its_cpu_rows_and_prints_every_row(capsys):
    with script_module("bench_gpu.py") as bench:
        bench.main(["--cpu-only", "--quick"])
    out = capsys.readouterr().out
    rows = {line.split()[0] + " " + line.split()[1] for line in out.splitlines() if line.strip()}
    assert {"cd1 64-32", "lenet b8", "dbn fit", "lenet fit"} <= rows
    cd1 = next(line for line in out.splitlines() if line.startswith("cd1"))
    assert float(cd1.split()[4].replace(",", "")) > 0  # samples per second measured (after "cd1 64-32 b20 cpu")

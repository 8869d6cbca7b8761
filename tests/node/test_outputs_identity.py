"""An output is never written into its input, whatever name reaches it: compared by device and inode.

A bind mount shows one folder under two names that no symlink resolution relates; ``predict --output``
through it must be refused like the input's own name.  Needs the right to mount (root); skipped otherwise.
"""

from __future__ import annotations

import subprocess

import pytest

from node import InputDataError
from node.data._outputs import write_parquet_safely


@pytest.fixture
def bind_mounted(tmp_path):
    """``tmp_path/data`` shown again as ``tmp_path/view`` (a bind mount, removed after the test)."""
    data, view = tmp_path / "data", tmp_path / "view"
    data.mkdir()
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(data), str(view)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.strip()}")
    try:
        yield data, view
    finally:
        subprocess.run(["umount", str(view)], check=True)


def test_an_output_reaching_the_input_through_a_bind_mount_is_refused_and_the_input_is_untouched(spark,
                                                                                                bind_mounted):
    data, view = bind_mounted
    frame = spark.createDataFrame([(float(value),) for value in range(20)], ["x"])
    frame.write.parquet(str(data / "in"))
    before = {path.name: path.read_bytes() for path in (data / "in").iterdir()}
    for output in (view / "in" / "predictions", view / "in", view):  # inside the input, the input, holding it
        with pytest.raises(InputDataError, match=r"the input .*device and inode"):
            write_parquet_safely(frame, f"file://{output}", inputs=(f"file://{data / 'in'}",), overwrite=True)
    assert {path.name: path.read_bytes() for path in (data / "in").iterdir()} == before
    write_parquet_safely(frame, str(data / "elsewhere"), inputs=(str(view / "in"),))  # a sibling is fine
    assert any(path.name.startswith("part-") for path in (data / "elsewhere").iterdir())

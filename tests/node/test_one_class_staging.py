"""Staging a labelled input whose labels hold one class: one line naming the label column and the class,
with the way to stage it for an RBM, and nothing staged -- not a dataset whose meta training later
refuses as one staging never writes."""

from __future__ import annotations

import numpy as np
import pytest

ONE_CLASS = {
    # (file name, how to write it, what the one line says after "sparkdbn stage: <file>: ")
    "a CSV of numbers": ("mine.csv", lambda path: path.write_text("a,b,label\n0,3,3\n1,2,3\n2,1,3\n3,0,3\n"),
                         "label column 'label' holds one class (3): a classifier needs at least 2; stage without "
                         "labels (--label-col '') for an RBM"),
    "a CSV of class 0": ("mine.csv", lambda path: path.write_text("a,b,label\n0,3,0\n1,2,0\n2,1,0\n3,0,0\n"),
                         "label column 'label' holds one class (0): a classifier needs at least 2"),
    "a CSV of strings": ("mine.csv", lambda path: path.write_text("a,b,label\n0,3,x\n1,2,x\n2,1,x\n3,0,x\n"),
                         "label column 'label' holds one class ('x'): a classifier needs at least 2"),
    "NPZ labels": ("mine.npz", lambda path: np.savez(path, X=np.zeros((4, 2)), y=np.array([7, 7, 7, 7])),
                   "label array 'y' holds one class (7): a classifier needs at least 2; stage an NPZ without its "
                   "array y for an RBM"),
}


@pytest.mark.parametrize("case", sorted(ONE_CLASS))
def test_labels_of_one_class_are_one_line_naming_the_class_and_nothing_is_staged(case, tmp_path, capsys):
    from node.cli import main

    name, write, expected = ONE_CLASS[case]
    write(tmp_path / name)
    source = str(tmp_path / name)
    assert main(["stage", "--input", source, "--url", str(tmp_path / "staged"), "--shards", "2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sparkdbn stage: {source}: {expected}"), lines
    assert not (tmp_path / "staged").exists() or not any((tmp_path / "staged").iterdir())


def test_the_same_input_stages_without_labels_and_with_two_classes(tmp_path, capsys):
    from node.cli import main
    from storage import open_dataset

    (tmp_path / "one.csv").write_text("a,b,label\n0,3,3\n1,2,3\n2,1,3\n3,0,3\n")
    (tmp_path / "two.csv").write_text("a,b,label\n0,3,3\n1,2,5\n2,1,3\n3,0,5\n")
    assert main(["stage", "--input", str(tmp_path / "one.csv"), "--url", str(tmp_path / "rbm"), "--label-col", ""]) == 0
    assert main(["stage", "--input", str(tmp_path / "two.csv"), "--url", str(tmp_path / "two")]) == 0
    assert open_dataset(str(tmp_path / "rbm")).meta["n_classes"] is None
    assert open_dataset(str(tmp_path / "two")).classes.tolist() == [3, 5]


@pytest.mark.slow
def test_a_dataframe_whose_labels_hold_one_class_is_refused_the_same_way_and_nothing_is_staged(spark, tmp_path):
    import pyarrow as pa

    from node import InputDataError, stage_dataframe

    df = spark.createDataFrame(pa.table({"features": [[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], "label": [3, 3, 3]}))
    expected = (r"^label column 'label' holds one class \(3\): a classifier needs at least 2; stage without labels "
                r"\(label_col=None\) for an RBM$")
    with pytest.raises(InputDataError, match=expected):
        stage_dataframe(str(tmp_path / "staged"), df)
    assert not (tmp_path / "staged").exists() or not any((tmp_path / "staged").iterdir())
    assert stage_dataframe(str(tmp_path / "rbm"), df, label_col=None)["n_classes"] is None

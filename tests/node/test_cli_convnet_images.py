"""`sparkdbn train --model convnet` takes images in the shape they were staged in, not a guess from their width.

Staged flat, 3 x 12 x 16 images (576 = 24 x 24 features) trained as one-channel 24 x 24 ones without a word.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import node
import storage
from node import cli
from node.cli._train_inputs import convnet_input_shape
from node.cli._options import UsageError


def shapes(rows: int = 360, channels: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Noisy ``(rows, channels, 12, 16)`` images of 4 classes: a bar whose place and channel is the class."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, rows)
    X = rng.random((rows, channels, 12, 16)).astype(np.float32) * 0.3
    for row, label in enumerate(y):
        X[row, label % channels, 2:10, 2 + 3 * label:5 + 3 * label] += 0.7
    return np.clip(X, 0, 1), y


def test_the_input_shape_is_the_staged_images_else_square_one_channel_images_said_in_the_log(caplog):
    assert convnet_input_shape(576, [3, 12, 16]) == (3, 12, 16)
    with caplog.at_level(logging.WARNING):
        assert convnet_input_shape(576, None) == (1, 24, 24)
    assert "takes the dataset's 576 features as one-channel 24x24 images" in caplog.text
    assert "input_shape: [C, H, W]" in caplog.text
    with pytest.raises(UsageError, match=r"768 features are not square; give the shape in --config: model: "
                                         r"\{kind: convnet, input_shape: \[C, H, W\]"):
        convnet_input_shape(768, None)
    with pytest.raises(UsageError, match=r"the dataset's images are \[3, 12, 16\], which is not 500 features"):
        convnet_input_shape(500, [3, 12, 16])


def test_staging_keeps_the_images_shape_beside_their_flat_rows(tmp_path):
    X, y = shapes()
    for name, images, expected in (("color", X, [3, 12, 16]), ("gray", X[:, 0], [1, 12, 16]),
                                   ("flat", X.reshape(len(X), -1), None)):
        np.savez(tmp_path / f"{name}.npz", X=images, y=y)
        url = str(tmp_path / name)
        assert cli.main(["stage", "--input", str(tmp_path / f"{name}.npz"), "--url", url]) == 0
        dataset = storage.open_dataset(url)
        assert dataset.meta.get("image_shape") == expected, name
        assert list(dataset.meta["feature_shape"]) == [int(np.prod(images.shape[1:]))]  # rows staged flat, as before
    node.stage_recipe("digits", str(tmp_path / "digits"))
    assert storage.open_dataset(str(tmp_path / "digits")).meta["image_shape"] == [1, 8, 8]


@pytest.mark.slow
def test_a_convnet_trains_on_staged_color_images_in_their_own_shape(spark, tmp_path, capsys):
    X, y = shapes()
    np.savez(tmp_path / "shapes.npz", X=X, y=y)
    url = str(tmp_path / "datasets" / "shapes")
    assert cli.main(["stage", "--input", str(tmp_path / "shapes.npz"), "--url", url, "--test-fraction", "0.25"]) == 0
    store = str(tmp_path / "store")
    assert cli.main(["train", "--model", "convnet", "--dataset", url, "--store", store, "--run-id", "color",
                     "--epochs", "2", "--no-report", "--no-progress"]) == 0
    model = node.load_run_model(node.open_run("file://" + store, "color"))
    assert model.input_shape_ == (3, 12, 16)  # was (1, 24, 24)
    assert model.layers_[0].output_shape[0] == model.layers_[0].filters  # a conv over 3 channels of 12 x 16
    held_out = storage.open_dataset(url + "/test")
    X_test, y_test = held_out.read_all()
    assert model.score(X_test, y_test) > 0.5  # 4 classes: chance is about 0.25

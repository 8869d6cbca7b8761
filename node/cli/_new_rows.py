"""``--input`` of ``evaluate`` and ``predict``: rows the run's model has not seen, read as its data was.

:meth:`NewRows.check` looks at the input before Spark starts (:func:`check_input`: a Parquet or CSV
file, folder or pattern; its columns where it is local) and finds its features: a column of vectors or
arrays (``--features-col``), or scalar columns -- ``--features-cols a,b,c``, else the columns the run's
staged dataset was staged from (``_meta.json``'s ``feature_names``: a model trained on a CSV file takes
new rows of that CSV's columns).  :meth:`NewRows.frame` reads it with Spark, gathers scalar columns into
one array column (not written back), and says how the run's dataset was scaled when the run trained (its
record keeps it: :class:`~node.cli._data.TrainedOn`), which the new rows are too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..data import apply_scaling, features_from_arrow
from ._data import TrainedOn, model_width
from ._inputs import InputFiles, check_input, column_list, feature_columns, gather_features, read_input
from ._options import UsageError

__all__ = ["NewRows", "SCALE_CHECK_ROWS", "check_scale"]

#: How many of the new rows the driver reads to see the scale of their features (:func:`check_scale`).
SCALE_CHECK_ROWS = 1000


@dataclass(frozen=True)
class NewRows:
    """A checked ``--input`` (:meth:`check`), and how its features are read.

    Attributes
    ----------
    files : InputFiles
        What :func:`check_input` found.
    features_col : str
        Its column of feature vectors or arrays, where it has one.
    features_cols : tuple of str or None
        Its scalar feature columns, as ``--features-cols`` named them.
    staged : tuple of str or None
        The columns the run's dataset was staged from, which new rows may have instead.
    scaling : dict or None
        The run's dataset's scaling when the run trained, applied to the new rows' features.
    adds : tuple of str
        The columns the command adds: an input that already holds one is refused.
    """

    files: InputFiles
    features_col: str
    features_cols: tuple[str, ...] | None
    staged: tuple[str, ...] | None
    scaling: dict | None
    adds: tuple[str, ...] = ()

    @classmethod
    def check(cls, options: dict[str, Any], trained: TrainedOn, model: Any, *, labelled: bool = False,
              adds: Sequence[str] = ()) -> NewRows:
        """``options["input"]`` as far as it is seen before Spark starts: where it is, its format and, for a
        local input, where its features are, whether the model takes that many and its label column.

        Parameters
        ----------
        options : dict
            The command's options (``input``, ``features_col``, ``features_cols``, ``label_col``).
        trained : TrainedOn
            The data the run trained on.
        model : object
            The run's model.
        labelled : bool
            The rows must have a label column (``evaluate``'s).
        adds : sequence of str
            The columns the command adds (``predict``'s): an input holding one is refused.
        """
        given = options.get("features_cols")
        rows = cls(check_input(str(options["input"])), str(options["features_col"]),
                   tuple(given.split(",") if isinstance(given, str) else given) if given else None,
                   trained.feature_names, trained.scaling, tuple(adds))
        columns = rows.files.columns
        if columns is not None:
            rows._check_not_added(columns)
            rows._check_width(rows._features(columns), model)
            if labelled and options["label_col"] not in columns:
                raise UsageError(f"--input {rows.files.path} has no label column {options['label_col']!r} "
                                 f"(--label-col); its columns are {column_list(columns)}")
        return rows

    def _check_not_added(self, columns: Sequence[str]) -> None:
        added = [column for column in self.adds if column in columns]
        if added:
            raise UsageError(f"--input {self.files.path} already holds a column {added[0]!r}, one of those predict "
                             f"adds ({', '.join(self.adds)}): is it the output of an earlier predict? Give its "
                             "input, or drop those columns first")

    def _features(self, columns: Sequence[str]) -> tuple[str, ...] | None:
        return feature_columns(columns, source=f"--input {self.files.path}", features_col=self.features_col,
                               features_cols=self.features_cols, staged=self.staged)

    def _check_width(self, columns: tuple[str, ...] | None, model: Any) -> None:
        width = model_width(model)
        if columns is not None and width is not None and len(columns) != width:
            raise UsageError(f"--input {self.files.path}: {len(columns)} feature columns {column_list(columns)}, the "
                             f"model takes {width} features")

    def frame(self, spark: Any) -> tuple[Any, str, tuple[str, ...]]:
        """``(DataFrame, its features column, columns not to write back)``, read by Spark."""
        frame = read_input(spark, self.files)
        self._check_not_added(frame.columns)
        columns = self._features(frame.columns)
        if columns is None:
            return frame, self.features_col, ()
        into = next(name for name in (self.features_col, *(f"{self.features_col}_{k}" for k in range(1, 100)))
                    if name not in frame.columns)
        numeric = {"tinyint", "smallint", "int", "bigint", "float", "double", "boolean"}
        types = dict(frame.dtypes)
        wrong = next((name for name in columns if types[name] not in numeric and not types[name].startswith("decimal")),
                     None)
        if wrong is not None:
            raise UsageError(f"--input {self.files.path}: feature column {wrong!r} holds {types[wrong]}, not numbers")
        return gather_features(frame, columns, into), into, (into,)


def check_scale(frame: Any, features_col: str, model: Any, scaling: dict | None, source: str) -> None:
    """Refuse new rows whose features are on another scale than a model with input bounds learned.

    A model whose inputs must lie in a range (``input_bounds()``: Bernoulli visible units, [0, 1]) was fitted
    on values in it (its fit refuses others), so rows of raw pixels (0..16, 0..255) give predictions that
    mean nothing, silently.  The first :data:`SCALE_CHECK_ROWS` rows are read on the driver, scaled as the
    run's dataset was (``scaling``), and refused where a value lies beyond the bounds by more than their
    width (outside [-1, 2] for [0, 1]): another scale, not a row a little past the training data's range.

    Parameters
    ----------
    frame : pyspark.sql.DataFrame
        The new rows.
    features_col : str
        Their column of feature vectors or arrays.
    model : object
        The run's model; one without input bounds (a ConvNet, Gaussian visible units) takes any scale.
    scaling : dict or None
        How the run's dataset was scaled (applied to the new rows too).
    source : str
        The rows as the message names them (``--input rows.csv``).
    """
    bounds = model.input_bounds() if hasattr(model, "input_bounds") else None
    if bounds is None:
        return
    head = frame.select(features_col).limit(SCALE_CHECK_ROWS)
    table = head.toArrow() if hasattr(head, "toArrow") else None  # Spark 4; an older Spark: not checked here
    if table is None or table.num_rows == 0:
        return
    X = features_from_arrow(table.column(0).combine_chunks(), name=features_col, dtype=np.float64)
    if scaling:
        X = apply_scaling(X, scaling)
    width = bounds[1] - bounds[0]
    outside = np.flatnonzero(((X < bounds[0] - width) | (X > bounds[1] + width)).any(axis=1))
    if len(outside):
        row, scaled = X[outside[0]], " (scaled as the run's dataset was)" if scaling else ""
        raise UsageError(f"{source}: row {outside[0]} has features in [{row.min():g}, {row.max():g}]{scaled}, "
                         f"another scale than the model learned: it takes features in [{bounds[0]:g}, "
                         f"{bounds[1]:g}]. Scale the rows as its training data was (raw 0..16 or 0..255 pixels: "
                         "divide by 16 or 255)")

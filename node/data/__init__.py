"""Training data: checked partitions for a fit, DataFrame and Arrow columns, labels, staging, outputs.

* :mod:`._prepare` -- numpy arrays, RDDs, DataFrames or a staged dataset -> checked partitions
  (:func:`prepare_training_data`), and the ``Block`` a node trains on; :mod:`._spark_reads` -- the data
  Spark reads (a staged dataset, a DataFrame, an RDD), shuffled and summarized; :mod:`._partitions` -- one
  partition checked and summarized where it is read; :mod:`._blocks` -- a fit's partitions in the store;
* :mod:`._frames` -- features and labels out of Arrow batches; :mod:`._labels` -- class labels;
  :mod:`._label_spread` -- labels sorted into partitions, or one row per class;
* :mod:`._staging`, :mod:`._stage_input` -- a DataFrame, a recipe or a file staged in the store;
  :mod:`._staged_frame` -- a staged dataset read back as a DataFrame;
* :mod:`._outputs` -- writing a DataFrame without replacing what the product did not write.
"""

from ._blocks import BLOCK_NAMES, BlockSink, decode_block, encode_block, store_block
from ._frames import feature_column_kind, features_from_arrow, is_dataframe, is_rdd, labels_from_arrow
from ._label_spread import grouped_labels, id_like_labels
from ._labels import DEFAULT_MAX_CLASSES, encode_labels
from ._outputs import check_output, write_parquet_safely
from ._prepare import (Block, DataOptions, PreparedData, array_inputs, check_model_input, count_rows, feature_names,
                       filled_partitions, prepare_training_data)
from ._spark_reads import check_staged_shards, open_staged_dataset
from ._stage_input import apply_scaling, input_format, stage_input
from ._staged_frame import read_staged_frame
from ._staging import RECIPE_IMAGES, RECIPES, stage_dataframe, stage_recipe

__all__ = ["feature_column_kind", "features_from_arrow", "is_dataframe", "is_rdd", "labels_from_arrow",
           "BLOCK_NAMES", "BlockSink", "decode_block", "encode_block", "store_block", "grouped_labels",
           "id_like_labels", "DEFAULT_MAX_CLASSES", "encode_labels", "check_output", "write_parquet_safely",
           "Block", "DataOptions", "PreparedData", "array_inputs", "check_model_input", "check_staged_shards",
           "count_rows", "feature_names", "filled_partitions", "open_staged_dataset", "prepare_training_data",
           "apply_scaling", "input_format", "stage_input", "read_staged_frame", "RECIPE_IMAGES", "RECIPES",
           "stage_dataframe", "stage_recipe"]

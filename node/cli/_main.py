"""``sparkdbn``: train, evaluate, predict, stage datasets and render reports from the shell.

    sparkdbn train                       # DBN on digits, 2 nodes on local Spark, ./sparkdbn-store
    sparkdbn train --config job.yaml     # settings from JSON/YAML; flags override them
    sparkdbn train --master spark://h:7077 --gpus-per-executor 4 --device gpu   # a node per GPU
    sparkdbn evaluate --run RUN          # the run's saved model on the dataset's test split
    sparkdbn predict --run RUN --input in.parquet --output out.parquet
    sparkdbn predict --run RUN --dataset file:///data/sparkdbn-store/datasets/digits/test --output out.parquet
    sparkdbn stage --recipe digits --url file:///data/sparkdbn-store/datasets/digits --shards 4
    sparkdbn report --run RUN --out plots/
    sparkdbn status --run RUN            # phases, epochs, validation, nodes: where a run stands
    sparkdbn status --config job.yaml    # one file for a run's commands: each takes its own keys, skips train's

Under spark-submit the master comes from spark-submit; otherwise ``--master`` (default
``local[2,4]``: 2 worker threads, so 2 nodes, each task tried up to 4 times).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from typing import Any, Iterator, Sequence

from py4j.protocol import Py4JError
from pyspark import SparkContext

import rbm
import storage

from .._errors import NodeError
from ..modes import MODE_NAMES
from ._commands import cmd_evaluate, cmd_predict, cmd_report, cmd_status, cmd_train
from ._options import (Interrupted, OneLineParser, Terminated, UsageError, interrupt_word, is_interrupt, load_config,
                       parse_spark_conf, without_overridden_alternatives)
from ._stage_command import check_stage_flags, cmd_stage
from ._train_inputs import TRAIN_DEFAULTS

__all__ = ["main", "build_parser"]

#: The commands that make something (a run, a dataset): they say which keys of a --config file they skip.
COMMANDS_THAT_MAKE = ("train", "stage")

logger = logging.getLogger(__name__)

VERBOSE_HELP = "print the traceback of an error and log at INFO level"

#: Where a run's key lives, said by ``sparkdbn --help``: a store copied, moved or read from another machine needs it.
KEYS_EPILOG = """run keys: each run's files are signed with its key, kept on the machine of its first fit in
~/.config/sparkdbn/keys/ under the run id and the store's URL. Another machine, or a store copied or
moved, needs SPARKDBN_KEY_FILE=<a copy of that file> (docs/store.md, Run keys)."""


def layer_sizes(text: str) -> list[int]:
    """``"100,100"`` -> ``[100, 100]`` (``--layers``)."""
    try:
        return [int(size) for size in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected hidden layer sizes separated by commas, e.g. 100,100; "
                                         f"got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="sparkdbn", description=__doc__.split("\n\n")[0].replace("``", ""),
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=KEYS_EPILOG)
    parser.add_argument("--verbose", "-v", action="store_true", help=VERBOSE_HELP)
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser, *, spark: bool = True) -> None:
        sub.add_argument("--config", help="JSON or YAML file of settings (flags override it)")
        if spark:  # a command that starts Spark
            sub.add_argument("--master", help="Spark master (ignored under spark-submit); default local[2,4]")
        sub.add_argument("--store", help="store URL or path; default ./sparkdbn-store")

    def spark_settings(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--conf", action="append", metavar="KEY=VALUE",
                         help="a Spark setting, as spark-submit takes it (repeatable); settings spark-submit "
                              "was given are never overridden by sparkdbn's defaults")

    train = commands.add_parser("train", help="train a model on Spark, evaluate it, write the report plots")
    common(train)
    spark_settings(train)
    train.add_argument("--run-id", help="run name in the store; an existing run resumes")
    train.add_argument("--dataset", help="digits (default), digits28, or a staged dataset URL")
    train.add_argument("--model", help="dbn (default), convnet or rbm")
    train.add_argument("--layers", type=layer_sizes, help="hidden layer sizes, e.g. 100,100")
    train.add_argument("--epochs", type=int, help="epochs per phase (default: 5 per pretraining phase, 20 of "
                       "fine-tuning, 10 for a conv net)")
    train.add_argument("--partitions", type=int, help="RDD partitions per epoch (default: 2 per node, or 8 per node "
                       "where more than 2 nodes scale the learning rates up; a staged dataset: one per shard)")
    train.add_argument("--batch-size", type=int, help="minibatch size on the nodes (default: the model's)")
    train.add_argument("--fanout", type=int, help="peers merged per partition at most (default: all fresh ones)")
    train.add_argument("--merge-alpha", type=float, help="weight of the peers' mean in a merge")
    train.add_argument("--scale-rule", choices=("auto", "linear", "sqrt", "none"),
                       help="how learning rates follow the number of nodes "
                            "(default auto: linear while nodes take few steps per epoch)")
    train.add_argument("--mode", choices=MODE_NAMES,
                       help="how nodes combine their progress: async (default), sync or sharing")
    train.add_argument("--seed", type=int, help="seed of a recipe's held-out split, of the model and of the training "
                       "(default 0)")
    train.add_argument("--bind-host", help="where each node listens (default: automatic -- loopback on local[N], "
                       "else SPARK_LOCAL_IP or the interface that reaches the driver; 0.0.0.0 needs --advertise-host)")
    train.add_argument("--advertise-host", help="host name or address peers connect to (default: the bind host)")
    train.add_argument("--port-range", help="ports the nodes bind, e.g. 40000-40100 (default: any free port)")
    train.add_argument("--device", choices=("cpu", "gpu", "auto"),
                       help="where the nodes compute: cpu, gpu (the GPU Spark assigns each task; fails without one) "
                            "or auto (that GPU where cupy sees it, else the CPU); default: the model's (cpu)")
    train.add_argument("--precision", choices=rbm.PRECISIONS,
                       help="the GEMMs' and convolutions' precision on GPUs with tensor cores (default float32)")
    train.add_argument("--gpus-per-executor", type=int, metavar="N",
                       help="Spark hands each executor N GPUs and each task one: a node per GPU (sets "
                            "spark.executor/task/worker.resource.gpu.*; before the session starts)")
    train.add_argument("--gpu-discovery-script", metavar="PATH",
                       help="with --gpus-per-executor: the script that lists a host's GPUs, a path on every "
                            "executor host (default: scripts/sparkdbn-gpus of this checkout)")
    train.add_argument("--out", help="folder for the report plots (default ./sparkdbn-report)")
    train.add_argument("--no-report", dest="report", action="store_const", const=False, default=None,
                       help="write no report plots")
    train.add_argument("--no-progress", dest="progress", action="store_const", const=False, default=None,
                       help="show no progress bar and print no epoch summary lines (they are still logged)")
    train.set_defaults(handler=cmd_train, defaults=TRAIN_DEFAULTS)

    for name, handler, text in (("evaluate", cmd_evaluate, "evaluate a run's model with Spark"),
                                ("predict", cmd_predict, "add prediction columns to a Parquet file or a staged "
                                                         "dataset")):
        sub = commands.add_parser(name, help=text)
        common(sub)
        spark_settings(sub)
        sub.add_argument("--run", help="the run whose saved model to use (or run_id: in --config)")
        sub.add_argument("--input", help="Parquet or CSV (*.csv) file, folder or pattern of new rows: their features "
                                         "(and a label column)")
        sub.add_argument("--features-col", help="--input's column of feature vectors or arrays (default features)")
        sub.add_argument("--features-cols", help="--input's scalar feature columns, comma-separated (default: the "
                                                 "columns the run's dataset was staged from, without --features-col)")
        sub.add_argument("--label-col", help="--input's label column (default label)")
        if name == "predict":
            sub.add_argument("--output", required=True, help="Parquet output folder (new or empty)")
            sub.add_argument("--overwrite", action="store_const", const=True,
                             help="replace predictions an earlier predict wrote to --output (nothing else)")
            sub.add_argument("--dataset", help="a staged dataset URL whose rows to predict instead of --input "
                                               "(URL/test: its held-out split); written with their row number and "
                                               "label")
        else:
            sub.add_argument("--dataset", help="recipe (digits, digits28) or staged dataset URL whose held-out "
                                               "split to use (default: the held-out split of the staged dataset "
                                               "the run trained on, else of the recipe it trained on, split by "
                                               "the run's seed)")
        sub.set_defaults(handler=handler, defaults={"dataset": None, "seed": None, "features_col": "features",
                                                    "label_col": "label"})

    stage = commands.add_parser("stage", help="stage a file of your own or a dataset recipe as Parquet shards")
    stage.add_argument("--config", help="JSON or YAML file of settings (flags override it)")
    stage.add_argument("--input", help="a CSV, Parquet, NPZ (arrays X, y) or IDX file (.gz too), path or URL")
    stage.add_argument("--label-col", help="--input's label column (default label; '' for none)")
    stage.add_argument("--features-cols", help="--input's feature columns, comma-separated (default: every other)")
    stage.add_argument("--labels", help="the IDX labels file of an IDX --input")
    stage.add_argument("--test-fraction", type=float, help="hold out this stratified share at <url>/test")
    stage.add_argument("--scale", choices=("minmax",), help="scale each feature to [0, 1] by the training "
                       "part's min/max (recorded in _meta.json, applied again to new data)")
    stage.add_argument("--seed", type=int, help="seed of the row shuffle before the rows are cut into shards, and "
                       "of the held-out split (default 0)")
    stage.add_argument("--recipe", help="digits (default) or digits28, without --input; its held-out split goes to "
                       "<url>/test")
    stage.add_argument("--url", help="dataset directory URL, e.g. file:///data/store/datasets/digits")
    stage.add_argument("--shards", type=int, help="Parquet shards, one per RDD partition (default 4)")
    stage.add_argument("--overwrite", action="store_const", const=True,
                       help="replace a dataset staged at --url before (nothing else is ever replaced)")
    stage.set_defaults(handler=cmd_stage, defaults={"recipe": "digits", "url": None, "shards": 4,
                                                    "label_col": "label"})

    report = commands.add_parser("report", help="render the PNG plots of a run")
    common(report, spark=False)  # drawn from the store, without Spark
    report.add_argument("--run", help="the run whose plots to render (or run_id: in --config)")
    report.add_argument("--out", help="output folder (default ./sparkdbn-report)")
    report.set_defaults(handler=cmd_report, defaults={"out": "sparkdbn-report"})

    status = commands.add_parser("status", help="where a run stands: phases, epochs, validation, nodes")
    common(status, spark=False)
    status.add_argument("--run", help="the run to describe (or run_id: in --config)")
    status.set_defaults(handler=cmd_status, defaults={})
    for sub in commands.choices.values():  # `sparkdbn <command> ... --verbose` too; SUPPRESS: not given
        # there, it leaves `sparkdbn --verbose <command>` alone
        sub.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    parser.set_defaults(subparsers=commands.choices)
    return parser


def _settings_of(command: argparse.ArgumentParser) -> set[str]:
    """The setting names ``command`` takes: its flags' and its defaults' (``_`` spelling)."""
    flags = {action.dest for action in command._actions if action.option_strings and action.dest != "help"}
    return flags | set(command.get_default("defaults") or {})


def _without_interrupts(record: logging.LogRecord) -> bool:
    """Drop a log record of a Ctrl-C (py4j's, with its traceback): the command says it in one line."""
    return not is_interrupt(record.exc_info[1] if record.exc_info else None)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` (a KeyboardInterrupt) in the main thread while the command runs, so that
    ``kill PID`` ends a fit as Ctrl-C does, not before its record and lease are put right."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers are the main thread's
        yield
        return

    def terminated(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sparkdbn`` console script; returns the exit status.

    Mistakes in what was asked (a missing file or run, a model that does not fit the data, a store
    that does not answer) print one line ``sparkdbn <command>: <what is wrong>`` and return 2.
    Ctrl-C prints one line (``train``: how to resume the run) and returns 130; SIGTERM is handled as Ctrl-C
    is (the run record says "failed", the lease is released) and returns 143.  A reader that leaves early
    (``sparkdbn status --run ID | head -1``) ends the command quietly, with status 1 where it still had lines
    to write.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after ``sparkdbn`` (default: ``sys.argv[1:]``).
    """
    try:
        try:
            with _sigterm_as_interrupt():
                return _run_command(argv)
        finally:
            sys.stdout.flush()  # a reader gone is found here, not in the interpreter's exit
    except BrokenPipeError:
        # Python's "Note on SIGPIPE": point stdout at devnull, so that the flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _run_command(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser: `sparkdbn train: unrecognized arguments: ...`
        args.subparsers[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    stderr = logging.StreamHandler()
    if not args.verbose:  # py4j logs a Ctrl-C during a call to the JVM, and its cleanup's errors, with tracebacks
        stderr.addFilter(_without_interrupts)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=[stderr])
    spark_before = SparkContext._active_spark_context  # a session running before the command is not its to stop
    with warnings.catch_warnings():  # the library's advice (a UserWarning to Python users) as one log line
        warnings.showwarning = _warning_as_log_line
        return _run_parsed(args, spark_before)


def _warning_as_log_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                         file: Any = None, line: str | None = None) -> None:
    """Show a warning as the command's other warnings are: one log line, not a file name and a source line."""
    logger.warning("%s", message)


def _run_parsed(args: argparse.Namespace, spark_before: Any) -> int:
    try:
        options = dict(args.defaults)
        internal = ("handler", "defaults", "config", "command", "verbose", "subparsers")
        known = set(options) | {key for key in vars(args) if key not in internal}
        elsewhere = {key for sub in args.subparsers.values() for key in _settings_of(sub)} - set(internal)
        config = load_config(getattr(args, "config", None), known, elsewhere,
                             say_skipped=args.command in COMMANDS_THAT_MAKE)
        flags = {key: value for key, value in vars(args).items() if value is not None and key not in internal}
        config = without_overridden_alternatives(config, flags)
        options.update(config)
        options.update(flags)
        parse_spark_conf(options.get("conf"))  # a malformed --conf is said before anything runs
        if "run" in known and not options.get("run"):
            raise UsageError(f"{args.command} needs --run (the run's name), or run_id: in its --config file")
        if args.command == "stage":
            if not options.get("url"):
                raise UsageError("stage needs --url (the dataset directory)")
            check_stage_flags(options, {key for key, value in {**config, **flags}.items() if value is not None})
        return int(args.handler(options) or 0)
    except (NodeError, storage.StoreError, UsageError) as error:
        if args.verbose:
            traceback.print_exc()
        if spark_before is None:
            _stop_spark_quietly()  # the one line below is the last thing printed, not Spark's traces after it
        print(f"sparkdbn {args.command}: {error}", file=sys.stderr)
        return 2
    except BaseException as error:  # Ctrl-C (or py4j's error raised for it): a train's run record says "failed"
        if not is_interrupt(error):
            raise
        if args.verbose:
            traceback.print_exc()
        word = interrupt_word(error)
        # Said first: under spark-submit the JVM copies this process's output and exits as it ends, and Spark's
        # stop below gives its copying thread the time to pass the line on (said last, it was lost there).
        print(f"sparkdbn {args.command}: {error if isinstance(error, Interrupted) else word}", file=sys.stderr,
              flush=True)
        if spark_before is None:
            try:
                _stop_spark_quietly()  # not Spark's traces of stopping under cancelled tasks after the line
            except BaseException as again:  # a second Ctrl-C while Spark stops: the command ends as it said
                if not is_interrupt(again):
                    raise
        return 130 if word == "interrupted" else 128 + signal.SIGTERM


#: How long a command that ends with an error waits for its cancelled Spark jobs to end before stopping Spark.
CANCELLED_JOBS_WAIT_S = 10.0


def _stop_spark_quietly(wait_s: float = CANCELLED_JOBS_WAIT_S) -> None:
    """Stop the Spark session the command started (none started: nothing to do), without the traces Spark logs
    when it stops under running tasks (a fit's background job that starts the Python workers, a task that was
    cancelled): its log is turned off, its jobs cancelled and waited for (``wait_s`` at most), then it stops.

    Parameters
    ----------
    wait_s : float
        Seconds to wait at most for the cancelled jobs to end.
    """
    sc = SparkContext._active_spark_context
    if sc is None:
        return
    try:
        sc.setLogLevel("OFF")  # the command says what went wrong in its one line; Spark's shutdown adds nothing
        sc.cancelAllJobs()
        deadline = time.monotonic() + wait_s
        while sc.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
            time.sleep(0.1)
        sc.stop()
    except Py4JError as error:  # a JVM already gone: nothing left to stop; the command's own error is the news
        logger.debug("Spark did not stop cleanly: %s", error)

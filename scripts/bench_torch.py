"""Benchmark: sparkdbn's three modes against pyspark's TorchDistributor running PyTorch DDP.

One process, one ``local[N]`` Spark session, the same data split for everyone.  For each straggler
factor (1 = none, 3 = one node or rank sleeps twice its compute time):

* sparkdbn: a DBN trained by :class:`node.Trainer` in each ``--modes`` mode, as ``bench_modes.py``
  does (same settings: batch 10, SGD with momentum 0.9, learning rate 0.2 decaying as
  ``1 / (1 + 0.1 t)``, L2 1e-4 on the weights, no dropout; the trainer scales the learning rate
  with the nodes merging, docs/scaling-out.md);
* ``torch-ddp``: ``TorchDistributor(num_processes=N, local_mode=True, use_gpu=False)`` running
  ``DistributedDataParallel`` (gloo) on the DBN's fine-tuning network (sigmoid layers of the same
  widths, a softmax output, cross-entropy) from PyTorch's default initialisation, with the same
  optimizer family, batch size per process, learning-rate decay, L2 and fine-tuning epochs, the
  learning rate multiplied by ``--torch-lr-scale`` (default N, the linear rule sparkdbn applies).
  Rank 0 evaluates the validation set after every epoch;
* ``torch-ddp+pre``: the same, from the DBN's weights pretrained on the driver in one process
  (``rbm.DBN.pretrain``, same settings and epochs; its seconds count as part of the fit).

With ``--model lenet`` (see ``bench_modes.py``: LeNet on digits28 images, ``--epochs TRAIN``,
target 0.98) sparkdbn trains ``rbm.lenet`` in each mode, and ``torch-ddp`` the same LeNet in
PyTorch (conv 5x5x20, max-pool 2, conv 5x5x50, max-pool 2, dense 500 ReLU, dense 10; cross-entropy)
from the very initial weights sparkdbn's LeNet starts from (same seed; Glorot-uniform convolutions
and output, He-normal dense layer, zero biases), with the same SGD with momentum 0.9, batch 64 per
process and learning rate 0.01 x ``--torch-lr-scale``, for the same epochs.  LeNet has nothing to
pretrain: ``torch-ddp+pre`` is the DBN's only, and "before ft" is sparkdbn's 0 and torch's process
start.

Before the timed runs an untimed one-epoch ``sync`` fit starts Spark's Python workers
(``--no-warmup`` skips it): else the first mode pays for them.

Printed per run, and as ratios to ``sync`` without a straggler: wall time of the fit (the
distributor's process start included); time before fine-tuning starts (the DBN's pretraining, with
its Spark jobs and validations; torch's process start and process-group set-up) and the fine-tuning
time after it; time from the fit's start, and from fine-tuning's start, until the validation
accuracy first reaches ``--target``; held-out test accuracy; bytes a node sends per fine-tuning
epoch (sparkdbn: what it writes to the store; DDP: a 2-process ring allreduce sends the gradient's
size per step).

    .venv/bin/python scripts/bench_torch.py                     # digits, local[2], 3 modes + DDP, x {1, 3}
    .venv/bin/python scripts/bench_torch.py --modes sync sharing --stragglers 1
    .venv/bin/python scripts/bench_torch.py --model lenet --train-rows 12000 --epochs 3   # digits28, target 0.98

Ratios are taken within one run of this script: these machines are noisy, absolute seconds are not
comparable between runs.  What differs, beyond the numbers: DDP is a synchronous allreduce every
step (sparkdbn's ``sync`` averages every ``averaging_frequency`` partitions); ``local_mode`` starts
the processes on the driver, outside Spark's executors, and ships no data through Spark; the DBN
pretrains its layers first, the torch network starts from random weights.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_modes  # noqa: E402
import node  # noqa: E402

from _bench_torch_report import RACE_COLUMNS, RACE_NOTE, race_rows, show, show_race  # noqa: E402
from _results import BenchRun  # noqa: E402

#: sparkdbn's fine-tuning settings in bench_modes.one_run and rbm.DBN's defaults, for the torch side.
FINETUNE = {"learning_rate": 0.2, "momentum": 0.9, "lr_decay": 0.1, "l2": 1e-4, "batch_size": 10}
#: The torch runs each --model allows (the first is the default too): LeNet has nothing to pretrain.
TORCH_VARIANTS = {"dbn": ["torch-ddp", "torch-ddp+pre"], "lenet": ["torch-ddp"]}


def layer_sizes(n_features: int, hidden: Sequence[int], n_classes: int) -> list[int]:
    """Widths of the DBN's fine-tuning network, input to output: ``[64, 100, 100, 10]`` on digits."""
    return [int(n_features), *map(int, hidden), int(n_classes)]


def build_mlp(sizes: Sequence[int]) -> Any:
    """The DBN's fine-tuning network in PyTorch: sigmoid hidden layers and a linear output (the
    softmax lives in the loss), ``nn.Linear`` weights of shape (n_out, n_in) = the DBN's ``W.T``."""
    from torch import nn

    layers: list[Any] = []
    for n_in, n_out in zip(sizes[:-2], sizes[1:-1]):
        layers += [nn.Linear(n_in, n_out), nn.Sigmoid()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


def build_lenet(in_channels: int, n_classes: int) -> Any:
    """``rbm.lenet`` in PyTorch (conv 5x5x20, max-pool 2, conv 5x5x50, max-pool 2, dense 500 ReLU,
    dense ``n_classes``; the softmax lives in the loss), initialised by sparkdbn's scheme: Glorot
    uniform for the convolutions and the output, He normal for the ReLU layer, zero biases.
    ``nn.Flatten`` of NCHW is sparkdbn's channels-first flatten."""
    from torch import nn

    net = nn.Sequential(nn.Conv2d(in_channels, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, n_classes))
    relu_layer = net[5]
    for module in net:
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            if module is relu_layer:  # normal, standard deviation sqrt(2 / fan_in)
                nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
            else:  # torch's fans of a conv kernel are sparkdbn's: C*KH*KW in, F*KH*KW out
                nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)
    return net


def build_network(network: dict) -> Any:
    """The torch network ``network`` describes: ``{"kind": "mlp", "sizes": [...]}`` (:func:`build_mlp`)
    or ``{"kind": "lenet", "in_channels": C, "n_classes": K}`` (:func:`build_lenet`)."""
    if network["kind"] == "lenet":
        return build_lenet(network["in_channels"], network["n_classes"])
    return build_mlp(network["sizes"])


def state_of(net: Any) -> dict[str, np.ndarray]:
    """``net``'s state dict as numpy copies (picklable, for the DDP processes)."""
    return {name: value.detach().numpy().copy() for name, value in net.state_dict().items()}


def load_convnet_parameters(net: Any, convnet: Any) -> None:
    """Copy an initialized :class:`rbm.ConvNet`'s weights into ``net`` from :func:`build_lenet`, layer
    by layer in order (conv ``W`` (F, C, KH, KW) as torch's; dense ``W`` (n_in, n_out) transposed)."""
    import torch

    params = convnet.parameters()
    trainable = [layer.name for layer in convnet.layers_ if f"{layer.name}.W" in params]
    modules = [module for module in net if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        for module, name in zip(modules, trainable, strict=True):
            weight = params[f"{name}.W"]
            weight = weight.T if isinstance(module, torch.nn.Linear) else weight
            module.weight.copy_(torch.from_numpy(np.ascontiguousarray(weight)))
            module.bias.copy_(torch.from_numpy(params[f"{name}.b"]))


def load_dbn_parameters(mlp: Any, dbn: Any) -> None:
    """Copy a fitted :class:`rbm.DBN`'s fine-tuning weights into ``mlp`` from :func:`build_mlp`."""
    import torch

    params = dbn.parameters("finetune")
    linear = [module for module in mlp if isinstance(module, torch.nn.Linear)]
    names = [(f"rbm{k}.W", f"rbm{k}.hbias") for k in range(len(linear) - 1)] + [("out.W", "out.b")]
    with torch.no_grad():
        for module, (weight, bias) in zip(linear, names, strict=True):
            module.weight.copy_(torch.from_numpy(np.ascontiguousarray(params[weight].T)))
            module.bias.copy_(torch.from_numpy(params[bias]))


def train_ddp(X: np.ndarray, y: np.ndarray, X_val: np.ndarray, y_val: np.ndarray, network: dict,
              config: dict, started_at: float) -> dict:
    """One DDP process (TorchDistributor runs it in each): train, rank 0 validating after every epoch.

    ``network``: what :func:`build_network` builds; ``X`` and ``X_val`` its inputs (rows, or images).

    ``started_at`` is the driver's ``time.time()`` when the fit began: every time reported is from
    it.  Every rank returns rank 0's result (the distributor keeps whichever rank's output it reads).
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(config["threads"])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ready_s = time.time() - started_at
    torch.manual_seed(config["seed"])
    net = build_network(network)
    if config.get("initial_state") is not None:
        net.load_state_dict({name: torch.from_numpy(value) for name, value in config["initial_state"].items()})
    model = DistributedDataParallel(net)  # broadcasts rank 0's initial weights
    weights = [p for name, p in net.named_parameters() if name.endswith("weight")]
    biases = [p for name, p in net.named_parameters() if name.endswith("bias")]
    groups = [{"params": weights, "weight_decay": config["l2"]}, {"params": biases}]
    if config.get("updater", "sgd") == "adam":  # sparkdbn's Adam: betas 0.9, 0.999, eps 1e-8, as torch's
        optimizer = torch.optim.Adam(groups, lr=config["learning_rate"])
    else:
        optimizer = torch.optim.SGD(groups, lr=config["learning_rate"], momentum=config["momentum"])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: 1.0 / (1.0 + config["lr_decay"] * t))
    loss_fn = torch.nn.CrossEntropyLoss()
    features, labels = torch.from_numpy(X), torch.from_numpy(y)
    val_features, val_labels = torch.from_numpy(X_val), torch.from_numpy(y_val)
    usable = len(X) - len(X) % world  # equal shards: unequal step counts would leave a rank waiting forever
    slowed = rank == world - 1 and config["straggler"] > 1.0
    slowed_s, steps, history = 0.0, 0, []
    for epoch in range(config["epochs"]):
        order = np.random.default_rng([config["seed"], epoch]).permutation(len(X))[:usable]
        mine = torch.from_numpy(order[rank::world])
        for start in range(0, len(mine), config["batch_size"]):
            began = time.perf_counter()
            rows = mine[start:start + config["batch_size"]]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(features[rows]), labels[rows])
            loss.backward()  # the allreduce of the gradients, in buckets
            optimizer.step()
            steps += 1
            if slowed:  # as sparkdbn's straggler_factor: sleep (factor - 1) x this step's compute time
                pause = (config["straggler"] - 1.0) * (time.perf_counter() - began)
                time.sleep(pause)
                slowed_s += pause
        schedule.step()
        if rank == 0:
            with torch.no_grad():
                accuracy = float((net(val_features).argmax(dim=1) == val_labels).float().mean())
            history.append({"epoch": epoch + 1, "time_s": time.time() - started_at, "val_accuracy": accuracy})
    parameter_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    slowed_each = [0.0] * world
    dist.all_gather_object(slowed_each, slowed_s)
    result = [{"ready_s": ready_s, "history": history, "steps_per_epoch": steps // config["epochs"],
               "parameter_bytes": parameter_bytes, "slowed_s": sum(slowed_each),
               "state": state_of(net)}]
    dist.broadcast_object_list(result, src=0)
    # Rank 0 aborted at exit in two of ~20 fits before the `del` below ("terminate called
    # without an active exception", after the output was written): Gloo work still holding
    # tensors at the interpreter's finalization (pytorch/pytorch#190489).  Wait for every rank,
    # drop the DDP module and its reducer, then tear the group down.
    dist.barrier()
    del model, optimizer
    dist.destroy_process_group()
    return result[0]


def pretrained_state(args: Any, X: np.ndarray, classes: np.ndarray) -> dict[str, np.ndarray]:
    """The DBN of ``bench_modes`` pretrained on the driver in one process (``--epochs`` RBM0 and
    RBM1 passes), with its Glorot output layer, as a state dict of :func:`build_mlp`'s network."""
    dbn = bench_modes.make_dbn(args)
    dbn.set_params(layer_params=[{"n_iter": epochs} for epochs in args.epochs[:len(args.hidden)]])
    dbn.pretrain(X).initialize(X.shape[1], classes)
    mlp = build_mlp(layer_sizes(X.shape[1], args.hidden, len(classes)))
    load_dbn_parameters(mlp, dbn)
    return state_of(mlp)


def lenet_initial_state(X: np.ndarray, classes: np.ndarray) -> dict[str, np.ndarray]:
    """The initial weights of ``bench_modes``' LeNet (as the trainer initializes it on the driver:
    same seed, same draws) as a state dict of :func:`build_lenet`'s network."""
    convnet = bench_modes.make_lenet().initialize(X.shape[1:], classes)
    net = build_lenet(X.shape[1], len(classes))
    load_convnet_parameters(net, convnet)
    return state_of(net)


def torch_run(args: Any, variant: str, straggler: float, data: tuple, validation: tuple) -> dict:
    """One TorchDistributor fit on the driver; figures keyed as :func:`bench_modes.one_run`'s.

    ``variant``: ``torch-ddp`` starts from PyTorch's default initialisation (LeNet: from sparkdbn's LeNet's
    initial weights); ``torch-ddp+pre`` first pretrains the DBN on the driver (single process, timed as
    part of the fit) and fine-tunes its weights.
    """
    import torch
    from pyspark.ml.torch.distributor import TorchDistributor

    X, y, X_test, y_test = data
    classes = np.unique(y)

    def index(labels: np.ndarray) -> np.ndarray:  # class indices 0 .. n_classes - 1, as the DBN's nodes see them
        return np.searchsorted(classes, labels).astype(np.int64)

    network, settings = torch_network(args, X, classes)
    config = {**settings, "learning_rate": settings["learning_rate"] * args.torch_lr_scale,
              "epochs": args.epochs[-1], "straggler": straggler, "seed": 0, "threads": args.torch_threads}
    # LeNet's initial weights are drawn before the clock starts (the trainer draws sparkdbn's on the driver).
    initial_state = lenet_initial_state(X, classes) if args.model == "lenet" else None
    started_at, started = time.time(), time.perf_counter()
    config["initial_state"] = pretrained_state(args, X, classes) if variant == "torch-ddp+pre" else initial_state
    pretrain_s = time.perf_counter() - started
    distributor = TorchDistributor(num_processes=args.nodes, local_mode=True, use_gpu=False)
    out = distributor.run(train_ddp, X.astype(np.float32), index(y), validation[0].astype(np.float32),
                          index(validation[1]), network, config, started_at)
    wall = time.perf_counter() - started
    net = build_network(network)
    net.load_state_dict({name: torch.from_numpy(value) for name, value in out["state"].items()})
    with torch.no_grad():
        predicted = net(torch.from_numpy(X_test.astype(np.float32))).argmax(dim=1).numpy()
    reached = [h["time_s"] for h in out["history"] if h["val_accuracy"] >= args.target]
    # A ring allreduce over n processes: each sends (n - 1) / n of the gradient in the
    # reduce-scatter and as much in the all-gather, one gradient's bytes per step at n = 2.
    per_step = out["parameter_bytes"] * 2 * (args.nodes - 1) / args.nodes
    return {"mode": variant, "straggler": straggler, "wall_s": wall, "target_s": reached[0] if reached else None,
            "accuracy": float(np.mean(classes[predicted] == y_test)), "pretrain_s": out["ready_s"],
            "driver_pretrain_s": pretrain_s, "finetune_scale": args.torch_lr_scale,
            "finetune_sent_per_node_epoch": per_step * out["steps_per_epoch"], "slowed_s": out["slowed_s"],
            "best_val_accuracy": max(h["val_accuracy"] for h in out["history"])}


def torch_network(args: Any, X: np.ndarray, classes: np.ndarray) -> tuple[dict, dict]:
    """For ``--model``: the :func:`build_network` description of the torch network, and the training
    settings sparkdbn's nodes use (their learning rate before scaling)."""
    if args.model == "lenet":
        return ({"kind": "lenet", "in_channels": int(X.shape[1]), "n_classes": len(classes)},
                bench_modes.lenet_settings(args.updater))
    return {"kind": "mlp", "sizes": layer_sizes(X.shape[1], args.hidden, len(classes))}, FINETUNE


def check_args(parser: Any, args: Any) -> Any:
    """``bench_modes.check_args``, then the torch options: the variants ``--model`` allows, the learning-rate scale."""
    args = bench_modes.check_args(parser, args)
    allowed = TORCH_VARIANTS[args.model]
    args.torch = list(allowed) if args.torch is None else args.torch
    if any(variant not in allowed for variant in args.torch):
        parser.error(f"--model {args.model} has the torch runs {', '.join(allowed)} only "
                     "(torch-ddp+pre fine-tunes the DBN's pretrained weights)")
    if args.torch_lr_scale is None:  # Adam's steps do not grow with the gradient's size: nor does its rate
        args.torch_lr_scale = 1.0 if args.updater == "adam" else float(args.nodes)
    return args


def main(argv: list[str] | None = None) -> None:
    from sklearn.model_selection import train_test_split

    parser = bench_modes.make_parser(__doc__.split("\n")[0])
    parser.add_argument("--torch-lr-scale", type=float, default=None,
                        help="torch's learning rate = sparkdbn's (0.2 for dbn, 0.01 for lenet) x this "
                             "(default: --nodes, the linear rule; 1 with --updater adam)")
    parser.add_argument("--torch", nargs="*", default=None, choices=TORCH_VARIANTS["dbn"],
                        help="the torch runs (default: both for dbn; lenet has torch-ddp only)")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false",
                        help="skip the untimed 1-epoch fit that starts Spark's Python workers first")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch threads per process (default 1)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run every system this many times, in turn (the race table shows each run)")
    args = check_args(parser, parser.parse_args(argv))
    run = BenchRun(__file__, args).start()  # --json comes with bench_modes' options: the printed report is kept
    X, y, X_test, y_test = bench_modes.load(args.data, args.model, args.train_rows)
    # One validation split for everyone (bench_modes alone lets the trainer hold out its own fifth).
    X, X_val, y, y_val = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)
    data, validation = (X, y, X_test, y_test), (X_val, y_val)
    spark = node.get_spark_session(f"local[{args.nodes}]", app_name="bench-torch", conf={"spark.ui.enabled": "false"})
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="sparkdbn-bench-torch-") as folder:
            if args.warmup:
                bench_modes.warm_up(spark, folder, args, data, validation=validation)
            for repeat in range(args.repeats):
                for straggler in args.stragglers:
                    for mode in [*args.modes, *args.torch]:
                        if mode.startswith("torch"):
                            result = torch_run(args, mode, straggler, data, validation)
                        else:
                            result = bench_modes.one_run(spark, f"file://{folder}/store-{repeat}", args, mode,
                                                         straggler, data, validation=validation)
                        print(f"{mode} straggler x{straggler:g}: {result['wall_s']:.1f} s, "
                              f"accuracy {result['accuracy']:.3f}", flush=True)
                        results.append({**result, "repeat": repeat + 1})
    finally:
        spark.stop()
    model = (f"DBN/MLP {layer_sizes(X.shape[1], args.hidden, len(np.unique(y)))}" if args.model == "dbn"
             else f"LeNet on {X.shape[1:]} images, {args.updater}")
    heading = (f"{args.data}, {model}, epochs {args.epochs} (torch: {args.epochs[-1]}), "
               f"local[{args.nodes}] / {args.nodes} DDP processes, {args.partitions} partitions, "
               f"{len(X)} training and {len(X_val)} validation rows, target validation accuracy {args.target}")
    print(f"\n{heading}")
    for repeat in range(1, args.repeats + 1):
        show([r for r in results if r["repeat"] == repeat])
    rows = race_rows(results)
    show_race(rows, args.target)
    run.table(f"Time to {args.target} held-out: {heading}", RACE_COLUMNS, rows, RACE_NOTE)
    run.finish()


if __name__ == "__main__":
    main()
else:
    # TorchDistributor pickles train_ddp with cloudpickle; imported (tests), this module is not importable
    # in the processes it starts, so ship its functions by value as they are when run as a script.
    from pyspark import cloudpickle as _cloudpickle

    _cloudpickle.register_pickle_by_value(sys.modules[__name__])

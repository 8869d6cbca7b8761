"""``sparkdbn status --run ID``: where a run stands, in one screen, from what the store holds.

Reads the signed run record (phases, epochs done, validation figures, early stopping, status,
where each node computed), the run's lease (does the driver of a "running" record still hold the run?)
and the peer registry (nodes, when each was last seen); nothing is written.
"""

from __future__ import annotations

import time
from typing import Any

import storage

from ..run import open_run

__all__ = ["run_status", "driver_state", "format_status", "node_state", "device_text", "device_label"]


def run_status(store_url: str, run: str, *, key: bytes | None = None, retry_timeout_s: float = 30.0) -> str:
    """The status screen of ``run`` (see :func:`format_status`).

    Parameters
    ----------
    store_url : str
        The store the run trains into (path, ``file://`` or ``hdfs://`` URL).
    run : str
        Run id.
    key : bytes, optional
        The run key's master secret, when it is not where the fit kept it (see :func:`node.resolve_run_key`).
    retry_timeout_s : float, optional
        How long a failing store is retried before the status gives up (default 30 s, as a fit's
        ``TrainingSettings.store_retry_timeout_s``).

    Raises
    ------
    InputDataError
        There is no such run in the store.
    StoreAccessError, RunKeyError, TrainingError
        As :func:`node.open_run`.
    """
    view = open_run(store_url, run, key=key, retry_timeout_s=retry_timeout_s)
    record, now = view.record or {}, time.time()
    # Behind an unreadable newer record entry the lease tells nothing of the record read: its driver went on.
    running = record.get("status") == "running" and not view.skipped_records
    driver = driver_state(view.lease, now) if running else None
    return format_status(run, record, view.runs.list_peers(), now=now, done_record=view.done_record, driver=driver,
                         skipped_records=view.skipped_records)


def driver_state(folder: storage.LeaseFolder, now: float) -> tuple[bool, str] | None:
    """Whether the driver of a run whose record says "running" still holds it, and a line saying so, from the run's
    lease: released, its process gone (a driver of this host), or its lease not renewed for twice its timeout by
    the two hosts' clocks (``now``: this host's).  None where the lease shows no holder.

    Parameters
    ----------
    folder : storage.LeaseFolder
        The run's lease folder.
    now : float
        This host's wall clock.
    """
    lease = folder.view()
    if not lease.generation:
        return None
    holder = folder.holder(lease.generation) or {}
    who = f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}"
    timeout_s = float(holder.get("timeout_s") or 60.0)
    takes = f"the next fit of the run takes it over after watching its lease for {timeout_s:.0f} s and resumes it"
    if lease.released:
        return False, f"not running: its driver ({who}) released the run without marking its record"
    if storage.holder_process_gone(holder):
        # Known: its process is gone and it did not release the run (SIGKILL, a crash, an exit after the store
        # failed). Not known: how it ended.
        return False, (f"not running: its driver ({who}) ended without releasing the run's lease (its process no "
                       "longer runs); the next fit of the run takes it over at once and resumes it")
    renewed = lease.renewed if lease.renewed is not None else holder.get("started")
    if not isinstance(renewed, (int, float)):
        return True, f"driver: {who}"
    silent_s = now - float(renewed)
    if silent_s > 2 * timeout_s:
        return False, (f"probably not running: its driver ({who}) last renewed its lease {_age(silent_s)} ago by the "
                       f"two hosts' clocks (it renews every {timeout_s / 4:.0f} s); {takes}")
    return True, f"driver: {who}, lease renewed {_age(silent_s)} ago"


def format_status(run: str, record: dict[str, Any], peers: dict[str, dict], *, now: float,
                  done_record: dict[str, Any] | None = None, driver: tuple[bool, str] | None = None,
                  skipped_records: tuple[str, ...] = ()) -> str:
    """Lines: the run and its status, what it trains on, one per phase, the validation set, one per node.

    When the newest record is not "done" but an earlier fit of the run finished (``done_record``),
    a line says that its model is the one served, and the status line says what the newer fit does.
    ``driver`` (:func:`driver_state`) says whether the driver of a "running" record still holds the run;
    where it does not, the status says so.  A node is shown alive only while the record says running and its
    driver holds the run (see :func:`node_state`).  The error of the fit before a resumed one
    (``previous_error``) is shown as history, not as the record's error.  ``skipped_records`` (see
    :class:`node.RunView`) are newer record entries that cannot be read: the status is then unknown,
    each is named, and what follows is the newest readable record's.

    Parameters
    ----------
    run : str
        The run id.
    record : dict
        The newest readable record (``{}``: none yet).
    peers : dict
        The peer registry, by node.
    now : float
        This host's wall clock.
    done_record : dict, optional
        The newest record that says done, when it is not ``record``.
    driver : tuple of (bool, str), optional
        Whether the driver of a "running" record still holds the run, and a line saying so.
    skipped_records : tuple of str
        ``"<url>: why"`` of each record entry newer than ``record`` that cannot be read.
    """
    status = record.get("status", "no record yet")
    newer = done_record is not None and status != "done"
    stopped = driver is not None and not driver[0]
    shown = "stopped without finishing (its record says running)" if stopped else status
    if skipped_records:
        shown = f"unknown: its newest record entry cannot be read (the newest readable record says {status})"
    lines = [f"run {run}: {'newer fit ' if newer and not skipped_records else ''}{shown}" + _ages(record, now)]
    for entry in skipped_records:
        lines.append(f"  unreadable record entry: {entry}")
    if skipped_records:
        them = "it" if len(skipped_records) == 1 else "them"
        lines.append(f"  restore {them} from a backup, or fit again with the same run id to go on from the newest "
                     "readable record (shown below)")
    if driver is not None:
        lines.append(f"  {driver[1]}")
    if record.get("error"):
        lines.append(f"  error: {str(record['error'])[:300]}")
    elif record.get("previous_error"):  # history: how the fit before this one ended
        lines.append(f"  the fit before this one failed: {str(record['previous_error'])[:300]}")
    if newer:
        lines.append(f"  served model: the last finished fit's (done{_ages(done_record, now)}), "
                     f"{(done_record.get('model') or {}).get('path', '?')}")
    if record.get("data"):
        lines.append(f"data: {_data_text(record['data'], record.get('classes'))}")
    steps = record.get("steps") or {}
    lines.append("phases:")
    for phase in record.get("phases") or []:
        lines.append("  " + _phase_line(phase, steps.get(phase) or {}))
    validation = record.get("validation")
    if validation:
        lines.append(f"validation: {validation.get('source')}")
    devices = record.get("devices") or {}
    # Nodes live only while the record says running and its driver is not known to have stopped; they are of
    # this fit where their entry names its id (entries and records written before they did: seen since it
    # started).  Behind an unreadable newer record both are unknown: the entries' own word stands (but for
    # processes known gone).
    live = bool(skipped_records) or (status == "running" and not stopped)
    fit_started = None if skipped_records else (record.get("resumed") or record.get("created"))
    fit = None if skipped_records else record.get("fit")
    nodes = sorted(set(peers) | set(devices))
    lines.append(f"nodes ({len(nodes)}):")
    for node in nodes:
        entry = peers.get(node) or {}
        seen = entry.get("last_seen")
        when = "never" if seen is None else f"{_age(now - float(seen))} ago"
        state = node_state(entry, live=live, fit_started=fit_started, fit=fit)
        lines.append(f"  {node}  {state:<5}  last seen {when}  host {entry.get('host', '?')}"
                     f"  pid {entry.get('pid', '?')}" + (f"  python {entry['python']}" if entry.get("python") else ""))
        if node in devices:
            lines.append(f"    device: {device_text(devices[node])}")
    return "\n".join(lines)


def node_state(entry: dict[str, Any], *, live: bool, fit_started: float | None, fit: str | None = None) -> str:
    """A node's state as the status screen shows it: ``alive`` only where its registry entry says so, its run
    is ``live``, it was seen since the run's current fit started, and its process is not known to be gone (a
    node of this host whose pid no longer runs); else ``gone``.  Other states are shown as the entry says.

    Parameters
    ----------
    entry : dict
        The node's peer registry entry (``status``, ``last_seen``, ``host``, ``pid``); ``{}``: none.
    live : bool
        Whether the run's record says running and its driver still holds the run.
    fit_started : float or None
        When the run's current fit started (the record's ``resumed``, else ``created``); None: unknown.
    fit : str, optional
        The current fit's id (the record's ``fit``).  Where both it and the entry name a fit, they decide,
        with no clock; else the entry's ``last_seen`` against ``fit_started`` (two hosts' clocks).
    """
    status = entry.get("status", "?")
    if status != "alive":
        return str(status)
    seen = entry.get("last_seen")
    if fit is not None and entry.get("fit") is not None:
        earlier_fit = entry["fit"] != fit
    else:
        earlier_fit = (isinstance(seen, (int, float)) and isinstance(fit_started, (int, float))
                       and float(seen) < float(fit_started))
    if not live or earlier_fit or storage.holder_process_gone(entry):
        return "gone"
    return "alive"


def _data_text(data: dict[str, Any], classes: list | None) -> str:
    """What a run trains on, from its record: where from, how many samples of which shape, its classes."""
    shape = "x".join(str(size) for size in data.get("feature_shape") or []) or "?"
    origin = f" ({data['origin']})" if data.get("origin") else ""
    text = (f"{data.get('source', '?')}{origin}, {data.get('n_samples', '?')} samples of {shape} features in "
            f"{data.get('partitions', '?')} partitions")
    if classes:
        named = ", ".join(str(label) for label in classes[:10]) + (", ..." if len(classes) > 10 else "")
        text += f", {len(classes)} classes ({named})"
    return text


def device_text(device: dict[str, Any]) -> str:
    """Where a node computed, in words, from its record (a :class:`~node._contract.NodeDevice` as a dict)."""
    if device.get("kind") == "gpu":
        index = device.get("index")
        cupy = f", cupy index {index}" if str(index) != str(device.get("address")) else ""
        memory = f"{float(device.get('memory_bytes') or 0) / 2**30:.1f} GiB"
        if device.get("free_bytes") is not None:  # what was free when the node looked, of the GPU's total
            memory = f"{float(device['free_bytes']) / 2**30:.1f} of {memory} free"
        warm = f", kernels warmed up in {float(device['warm_up_s']):.1f}s" if device.get("warm_up_s") else ""
        convolutions = f", convolutions by {device['convolutions']}" if device.get("convolutions") else ""
        return f"GPU {device.get('address')} ({device.get('name')}, {memory}{cupy}){warm}{convolutions}"
    why = f"; {device['reason']}" if device.get("reason") else ""
    return f"the CPU of {device.get('host', '?')}{why}"


def device_label(device: dict[str, Any] | None) -> str:
    """A node's device in two words (a plot's legend): ``GPU 0``, ``CPU``."""
    if not device:
        return ""
    return f"GPU {device.get('address')}" if device.get("kind") == "gpu" else "CPU"


def _phase_line(phase: str, step: dict[str, Any]) -> str:
    done, planned = int(step.get("epochs_done", 0)), int(step.get("epochs", 0))
    state = "done" if step.get("result") else ("training" if done else "waiting")
    text = f"{phase:<10} {state:<8} epochs {done}/{planned}"
    validation = step.get("validation") or []
    if validation:
        newest = validation[-1]
        figures = ", ".join(f"{name} {float(value):.4f}" for name, value in newest.items() if name.startswith("val_"))
        text += f"  epoch {int(newest['epoch']) + 1}: {figures}"
    stopping = step.get("early_stopping")
    if stopping and stopping.get("best") is not None:
        text += (f"  best {stopping['metric']} {float(stopping['best']):.4f} at epoch {int(stopping['best_epoch']) + 1}"
                 f"{', stopped early' if stopping.get('stopped') else ''} (waited {stopping.get('wait', 0)})")
    return text


def _ages(record: dict[str, Any], now: float) -> str:
    parts = []
    for name in ("created", "resumed", "finished"):
        if record.get(name):
            parts.append(f"{name} {_age(now - float(record[name]))} ago")
    return f" ({', '.join(parts)})" if parts else ""


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"

"""Node actors, brokerless ZeroMQ publish-subscribe and the asynchronous merge rule.

A node (one per process per run) publishes its weights to the store and announces each new
version over signed, CurveZMQ-encrypted ZeroMQ PUB/SUB; it fetches its peers' announced versions in the background
and hands the trainer the fresh ones to merge (:func:`merge_snapshots`).  No process is central.
Only what the run's key signed is acted upon (announcements, snapshots, registry entries), and
what a hostile peer can make a node hold is bounded; see ``NodeHandle.stats`` for the refusals.

>>> node = start_node("run-1", "host-1234", storage.open_store("/tmp/store"), run_key)  # doctest: +SKIP
>>> params, used = node.merge("rbm", model.parameters("rbm"))                           # doctest: +SKIP
"""

import logging

from ._errors import ActorsError, MergeError, MessageError, NodeAddressError, NodeStoppedError, PublishError
from ._merge import check_snapshot, merge_snapshots
from ._messages import SCHEMA_VERSION, Goodbye, Snapshot, WeightAnnouncement
from ._node import NodeHandle, start_node
from ._outer import OuterState, check_outer_settings, outer_settings_for_gain, outer_step, outer_step_enabled
from ._transport import parse_port_range
from ._wire import decode_frames, encode_message

__all__ = [
    "start_node",
    "NodeHandle",
    "Snapshot",
    "merge_snapshots",
    "check_snapshot",
    "OuterState",
    "outer_step",
    "outer_step_enabled",
    "outer_settings_for_gain",
    "check_outer_settings",
    "WeightAnnouncement",
    "Goodbye",
    "SCHEMA_VERSION",
    "encode_message",
    "decode_frames",
    "ActorsError",
    "MessageError",
    "MergeError",
    "PublishError",
    "NodeStoppedError",
    "NodeAddressError",
    "parse_port_range",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())

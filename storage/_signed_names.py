"""Files whose name proves them: ``<seq>-<sha256>-<mac><suffix>``.

The MAC (HMAC-SHA256 under the run's key) covers a purpose, the writer's context (run, phase,
node, ...), the sequence number and the sha256 of the content.  A reader tells a file that no key
holder named from one that is ours by its name alone, before reading it, and then checks the
content against the named sha256.  Weight snapshots, the ``sharing`` mode's updates and the
training partitions stored for work stealing are named this way, each with its own purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._auth import mac_hex, verify_mac

__all__ = ["SignedName", "SignedNames"]


@dataclass(frozen=True)
class SignedName:
    """A parsed name (not yet verified: see :meth:`SignedNames.verifies`)."""

    seq: int
    sha256: str
    mac: str


class SignedNames:
    """The names of one kind of file: its MAC purpose, suffix and sequence width.

    Parameters
    ----------
    purpose : str
        Bound in every MAC, so that a name of one kind never verifies as another.
    suffix : str
        ``".npz"``, ``".block"``, ...
    seq_digits : int
        The sequence number's zero-padded width (a longer one still parses).
    """

    def __init__(self, purpose: str, suffix: str, seq_digits: int = 8) -> None:
        self.purpose, self.suffix, self.seq_digits = purpose, suffix, int(seq_digits)
        self._pattern = re.compile(rf"^(\d{{{self.seq_digits},}})-([0-9a-f]{{64}})-([0-9a-f]{{64}}){re.escape(suffix)}$")

    def mac(self, key: bytes, context: tuple, seq: int, sha256: str) -> str:
        """The MAC of a file of ``context`` (e.g. ``(run, phase, node)``) with this ``seq`` and content digest."""
        return mac_hex(key, self.purpose, *context, int(seq), sha256)

    def name(self, seq: int, sha256: str, mac: str) -> str:
        return f"{int(seq):0{self.seq_digits}d}-{sha256}-{mac}{self.suffix}"

    def signed(self, key: bytes, context: tuple, seq: int, sha256: str) -> str:
        """The name under which a key holder stores content ``sha256`` as ``seq``."""
        return self.name(seq, sha256, self.mac(key, context, seq, sha256))

    def parse(self, name: str) -> SignedName | None:
        """The parts of ``name``; None for any other name (a temporary, a stranger's file)."""
        match = self._pattern.match(name)
        return None if match is None else SignedName(int(match[1]), match[2], match[3])

    def verifies(self, key: bytes, context: tuple, signed: SignedName) -> bool:
        """Whether ``signed`` was named by a holder of ``key`` for ``context`` (constant-time compare)."""
        return verify_mac(key, signed.mac, self.purpose, *context, int(signed.seq), signed.sha256)

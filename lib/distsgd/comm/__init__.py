"""Communication layer: collectives, the byte ledger, and network emulation."""
from .comm import Comm, Group, Handle, join_group
from .ledger import Entry, Ledger
from .netmodel import KINDS, PRESETS, NetModel, bytes_sent, named_net, parse_net

__all__ = ["Comm", "Group", "Handle", "join_group", "Entry", "Ledger", "KINDS", "PRESETS", "NetModel",
           "bytes_sent", "named_net", "parse_net"]

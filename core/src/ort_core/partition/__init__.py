"""Partitioning: which provider runs which nodes, cut into subgraphs for compile."""

from .partitioner import Partition, partition, recut

__all__ = ["Partition", "partition", "recut"]

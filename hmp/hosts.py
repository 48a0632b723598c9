"""Which devices share a host: the grouping rule of the two-level all-reduce.

Pure Python (no TensorFlow), so that the engine (``hmp.mesh.collectives``) and the
cost model (``hmp.planning.costmodel``) apply the same rule.
"""

import collections


def group_by_host(hosts):
    """``{host: [positions]}`` in order of first appearance."""
    groups = collections.OrderedDict()
    for position, host in enumerate(hosts):
        groups.setdefault(host, []).append(position)
    return groups


def is_hierarchical(hosts):
    """Whether a two-level reduction differs from a flat one: several hosts,
    and at least one of them with several devices."""
    groups = group_by_host(hosts)
    return 1 < len(groups) < len(hosts)

"""The rack power the engine is given (DESIGN §18): capped racks and their nodes' figures.

Part of the configuration's rows (jobs.scheduling.config): a cap set or lowered, a node moved
to another rack, a new DCGM measurement or one growing stale changes the digest and rebuilds a
warm engine — at most once per metrics poll, and only while some rack has a cap.
"""

from __future__ import annotations

from decimal import Decimal

from jobs.scheduler.engine.model import NodePower

# A measurement older than this is no longer the node's draw: its busy cards' estimate is used.
MEASURED_FRESH_SECONDS = 300

# (columns, rows, order) as config._PARTS holds them. A slice draws its fraction of its card's
# board power, rounded up; a flavor without a board power draws only what is measured.
PART = (
    "n.id, r.id, r.power_cap_kw::text, coalesce(n.idle_watts, 0), "
    "(coalesce(f.board_watts, 0) * f.fraction_numerator + f.fraction_denominator - 1)"
    " / f.fraction_denominator, "
    f"CASE WHEN n.measured_at > now() - interval '{MEASURED_FRESH_SECONDS} seconds'"
    " THEN n.measured_watts END",
    "quotas_node n JOIN quotas_rack r ON r.id = n.rack_id JOIN quotas_flavor f ON f.id = n.flavor_id"
    " JOIN quotas_cluster c ON c.id = n.cluster_id WHERE c.active AND r.power_cap_kw IS NOT NULL",
    "n.id",
)


def parse(rows: list) -> tuple[dict[str, int], dict[str, NodePower]]:
    """(rack id -> cap in watts, node id -> its power figures), in the engine's ids."""
    caps: dict[str, int] = {}
    nodes: dict[str, NodePower] = {}
    for node, rack, cap_kw, idle, board, measured in rows:
        caps[f"r{rack}"] = int(Decimal(cap_kw) * 1000)
        nodes[f"n{node}"] = NodePower(f"r{rack}", idle, board, measured)
    return caps, nodes

"""Extension points through which apps above ``portal`` take part in its writes without
``portal`` importing them (dependencies point portal ← quotas ← jobs ← billing).

``tree_move_checks``: callables ``check(kind, obj_id, new_department_id)`` run inside the
transaction before a department is re-parented (kind "department") or a project moves
(kind "project"). They raise ``ValidationError`` to refuse, e.g. when the move would break
the quota tree. ``quotas`` registers its check in ``QuotasConfig.ready``.
"""

from collections.abc import Callable

tree_move_checks: list[Callable[[str, int, int | None], None]] = []


def run_tree_move_checks(kind: str, obj_id: int, new_department_id: int | None) -> None:
    for check in tree_move_checks:
        check(kind, obj_id, new_department_id)

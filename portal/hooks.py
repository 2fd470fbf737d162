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


# ``project_move_checks``: callables ``check(project, to_department, at)`` run inside the
# transaction of ``portal.services.project_move`` before anything is written; they raise
# ``ValidationError`` to refuse (billing: ``at`` already metered or in a closed month; quotas: a
# live loan). ``project_move_hooks``: callables ``apply(project, from_department_id, actor)`` run
# in the same transaction after the project's department changed (quotas re-parents its quota
# nodes under the new department and validates the tree); a raise rolls the whole move back.
ProjectMoveCheck = Callable[..., None]
project_move_checks: list[ProjectMoveCheck] = []
project_move_hooks: list[ProjectMoveCheck] = []


def run_project_move_checks(project, to_department, at) -> None:
    for check in project_move_checks:
        check(project, to_department, at)


def run_project_move_hooks(project, from_department_id: int, actor) -> None:
    for apply in project_move_hooks:
        apply(project, from_department_id, actor)


# ``user_deactivated_hooks``: callables ``apply(user_id)`` run after the commit that deactivated a
# directory user whose centre stops their jobs (``GPUPOOL_DEPROVISION_JOBS = "stop"``); ``jobs``
# registers the one that cancels them.
user_deactivated_hooks: list[Callable[[int], None]] = []


def run_user_deactivated_hooks(user_id: int) -> None:
    for apply in user_deactivated_hooks:
        apply(user_id)

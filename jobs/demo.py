"""Demo priority classes (DESIGN §4)."""

from .models import PriorityClass

CLASSES = [
    # name, value, preemptible, grace seconds, description
    ("inference-online", 1000, False, 60, "Online inference / 在线推理"),
    ("training-high", 500, True, 300, "Urgent training / 紧急训练"),
    ("training", 100, True, 300, "Training / 训练"),
    ("dev", 50, True, 30, "Development / 开发调试"),
    ("best-effort", 0, True, 30, "Best effort / 尽力而为"),
]


def seed(stdout) -> None:
    for name, value, preemptible, grace, description in CLASSES:
        PriorityClass.objects.update_or_create(name=name, defaults={
            "value": value, "preemptible": preemptible, "grace_seconds": grace, "description": description})
    stdout.write(f"jobs: {len(CLASSES)} priority classes")

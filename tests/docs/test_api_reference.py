"""docs/api.md is exactly what scripts/api_reference.py renders from today's OpenAPI schema, so
the reference cannot drift from the serializers. After an API change: python scripts/api_reference.py"""

from __future__ import annotations

from .conftest import ROOT, load_script


def test_docs_api_md_is_the_rendering_of_the_current_schema():
    generator = load_script("scripts/api_reference.py")
    schema = generator.schema_from_spectacular()
    expected = generator.Renderer(schema).render()
    current = (ROOT / "docs" / "api.md").read_text()
    assert current == expected, "docs/api.md is out of date: run python scripts/api_reference.py"


def test_the_reference_lists_every_api_operation_once():
    generator = load_script("scripts/api_reference.py")
    schema = generator.schema_from_spectacular()
    text = (ROOT / "docs" / "api.md").read_text()
    operations = [
        f"### {m.upper()} {p}" for p, ops in schema["paths"].items() for m in ops if m in generator.METHODS
    ]
    assert len(operations) > 70
    for heading in operations:
        assert text.count(heading + "\n") == 1, heading
    # The submission body of DESIGN §9 is documented field by field.
    submit = text.split("### POST /api/v1/jobs/\n", 1)[1].split("###", 1)[0]
    for field in (
        "name",
        "project",
        "kind",
        "flavor",
        "workers",
        "gpus_per_worker",
        "gpu_milli",
        "min_workers",
        "priority",
        "image",
        "command",
        "max_runtime_seconds",
        "checkpointing",
        "sim_duration_seconds",
    ):
        assert f"| `{field}` |" in submit, field

"""The domestic readiness report (DESIGN §14, issue 23 item 5): per domestic flavor (Huawei
Ascend, Cambricon, Hygon DCU), operator coverage per framework against the industry bar of 90 %
and throughput against 80 % of the reference card — declared in the profile and measured from
job history (``jobs.throughput``). Flavor profiles are not tenant data: anyone who sees reports
sees this."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from jobs.throughput import Measured, measured_throughput, reference_flavor
from quotas.models import Flavor
from quotas.profiles import COVERAGE_BAR, DOMESTIC_VENDORS, THROUGHPUT_BAR, Coverage, coverages


@dataclass(frozen=True)
class Readiness:
    flavor: Flavor
    coverages: list[Coverage]
    measured: Measured | None

    @property
    def declared(self) -> Decimal:
        return self.flavor.relative_throughput

    @property
    def coverage_ok(self) -> bool | None:
        """Every framework with a coverage reaches the bar; None when none is recorded."""
        return all(c.coverage >= COVERAGE_BAR for c in self.coverages) if self.coverages else None

    @property
    def declared_ok(self) -> bool:
        return self.declared >= THROUGHPUT_BAR

    @property
    def measured_ok(self) -> bool | None:
        return None if self.measured is None else self.measured.ratio >= THROUGHPUT_BAR


def domestic_readiness() -> list[Readiness]:
    flavors = list(Flavor.objects.filter(vendor__in=DOMESTIC_VENDORS, active=True).order_by("name"))
    measured = measured_throughput([f.pk for f in flavors]) if flavors else {}
    return [Readiness(f, coverages(f.operator_coverage), measured.get(f.pk)) for f in flavors]


def reference_name() -> str:
    found = reference_flavor()
    return found.name if found else ""

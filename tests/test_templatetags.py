from decimal import Decimal

import pytest

from portal.templatetags.gpupool import qty


@pytest.mark.parametrize(("value", "label", "shown"), [
    (Decimal("8.000"), "∞", "8"),
    (Decimal("0.500"), "∞", "0.5"),
    (Decimal("120"), "∞", "120"),
    (None, "∞", "∞"),
    (Decimal("0"), "all", "0"),  # 0 means "lends nothing", not "no limit"
])
def test_qty_shows_numbers_without_trailing_zeros_and_labels_no_limit(value, label, shown):
    assert qty(value, label) == shown

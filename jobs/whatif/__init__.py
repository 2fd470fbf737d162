"""What-if: trace replay through the production engine (`replay/`, pure), the history as a trace,
and the policy advisor (`advisor/`, pure; its searches, pages and API)."""

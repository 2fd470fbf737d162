"""Internals of the pure scheduling core; the public entry points are :mod:`jobs.scheduler`,
:mod:`jobs.placement` and :mod:`quotas.admission`."""

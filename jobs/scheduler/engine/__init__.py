"""Internals of the pure scheduling core; the public entry points are :mod:`jobs.scheduler.scheduler`,
:mod:`jobs.scheduler.placement` and :mod:`quotas.admission`."""

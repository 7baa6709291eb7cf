"""The resource layer's errors: one base, so callers map every resource failure to a clear message in one place."""

from __future__ import annotations


class ResourceError(RuntimeError):
    """Spark, the metastore or Kerberos could not be set up or reached; the message says what to do."""


class MetastoreError(ResourceError):
    """The local metastore could not be started, reached or stopped."""


class KerberosError(ResourceError):
    """Kerberos login or a Kerberized call failed; the message says what to do."""

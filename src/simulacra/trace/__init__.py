"""Trace records, their canonical encoding and digest, and first divergence (layer 2).

A trace is the test oracle of simulacra: the same seed must give the same trace,
byte for byte, on every backend. This package holds:

* :func:`canonical` and :func:`encode_record`: the canonical encoding of
  ``(time, kind, who, payload)`` records, identical in every process;
* :class:`Trace`: an immutable sequence of records with a SHA-256
  :meth:`~Trace.digest`, readable from and writable to JSON lines;
* :func:`first_divergence` and :func:`assert_equivalent`: where two runs part;
* :class:`MemoryTracer` and :class:`JsonlTracer`: recorders that implement the
  kernel's ``Tracer`` protocol (``record(time, kind, who, payload)``).

Imports: the standard library and layer 0 (``simulacra.errors``,
``simulacra._util``) only. It works on plain records and duck-typed
``trace_records``, and implements the kernel's ``Tracer`` protocol structurally,
so it does not import ``simulacra.core``.
"""

from ._canonical import TRACE_SCHEME as TRACE_SCHEME
from ._canonical import JsonValue as JsonValue
from ._canonical import TraceRecord as TraceRecord
from ._canonical import canonical as canonical
from ._canonical import encode_record as encode_record
from ._trace import Divergence as Divergence
from ._trace import HasTraceRecords as HasTraceRecords
from ._trace import Trace as Trace
from ._trace import TraceLike as TraceLike
from ._trace import assert_equivalent as assert_equivalent
from ._trace import digest as digest
from ._trace import first_divergence as first_divergence
from ._tracers import JsonlTracer as JsonlTracer
from ._tracers import MemoryTracer as MemoryTracer

__all__ = [
    "digest",
    # encoding
    "TRACE_SCHEME",
    "JsonValue",
    "TraceRecord",
    "canonical",
    "encode_record",
    # traces and comparison
    "Trace",
    "TraceLike",
    "HasTraceRecords",
    "Divergence",
    "first_divergence",
    "assert_equivalent",
    # recorders
    "MemoryTracer",
    "JsonlTracer",
]

from simulacra._util import claim_public_module

claim_public_module(__name__, globals())
del claim_public_module

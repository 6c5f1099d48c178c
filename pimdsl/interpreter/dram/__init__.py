"""The DRAM engine. Only names that a command line lists live here: importing this package loads
nothing else (no numpy), so `pimc --help` stays quick."""

TRACE_FORMATS = ("dramsim3", "ramulator")      # the request-trace formats that dram/traces.py reads

"""IR -> JSON for `pimc show --json`. Keys carry their units (from the IR field names)."""
from __future__ import annotations

import dataclasses

from ..frontend.diagnostics import Span


def to_json(value):
    if dataclasses.is_dataclass(value):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.metadata.get("json") == "omit_default" and item == f.default:
                continue                      # optional constructs a spec does not use stay out of the export
            if isinstance(item, Span):
                out["source"] = str(item)
            elif not f.repr:                 # source bookkeeping (e.g. where each param is set)
                continue
            else:
                out[f.name] = to_json(item)
        return out
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def spec_to_json(spec) -> dict:
    return to_json(spec)

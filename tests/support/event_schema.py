"""The events file's schema (docs/events.schema.json), checked on every event the integration tests read
(harness.DdprunTestCase.events): a kind ddprun writes that the schema does not know, or an event missing a field its
kind always has, fails the test that read it (issue 31: events were built at ~20 sites with no declared shape)."""
import json
import os

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "events.schema.json")
with open(SCHEMA_PATH) as _f:
    KINDS = json.load(_f)["kinds"]

_TYPES = {"int": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "str": lambda v: isinstance(v, str), "bool": lambda v: isinstance(v, bool),
          "list": lambda v: isinstance(v, list), "object": lambda v: isinstance(v, dict)}


def problems(event):
    """What is wrong with one event against the schema ([] when nothing)."""
    if not isinstance(event, dict):
        return [f"not an object: {event!r}"]
    kind = event.get("event")
    if kind not in KINDS:
        return [f"unknown event kind {kind!r} (docs/events.schema.json)"]
    out = []
    if not _TYPES["int"](event.get("time_ms")):
        out.append(f"{kind}: time_ms missing or not an int")
    for field, wanted in KINDS[kind]["required"].items():
        if field not in event:
            out.append(f"{kind}: missing {field!r}")
            continue
        value = event[field]
        if wanted.endswith("|null"):
            if value is None:
                continue
            wanted = wanted[:-5]
        if not _TYPES[wanted](value):
            out.append(f"{kind}: {field!r} is {value!r}, not {wanted}")
    return out


def check(events, where=""):
    """Raises AssertionError listing every problem of `events`."""
    found = [p for e in events for p in problems(e)]
    if found:
        raise AssertionError(f"events{' of ' + where if where else ''} do not fit docs/events.schema.json:\n  " +
                             "\n  ".join(found))
    return events

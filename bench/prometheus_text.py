"""Prometheus text exposition, read by benchmarks: samples, the difference of two scrapes, histogram quantiles."""

from __future__ import annotations

import math
import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def samples(text: str) -> dict[str, float]:
    """`name{labels}` -> value for every sample line (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if m := _SAMPLE.match(line):
            try:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
            except ValueError:
                continue
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What happened between two scrapes (counters and histogram buckets only grow)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def histogram(sampled: dict[str, float], name: str) -> tuple[list[tuple[float, float]], float, float]:
    """(upper bound, cumulative count) buckets in order, the count and the sum of histogram `name`."""
    buckets = []
    for key, value in sampled.items():
        if key.startswith(name + "_bucket{") and (m := re.search(r'le="([^"]+)"', key)):
            buckets.append((math.inf if m.group(1) == "+Inf" else float(m.group(1)), value))
    buckets.sort()
    return buckets, sampled.get(name + "_count", 0.0), sampled.get(name + "_sum", 0.0)


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation inside its bucket, as Prometheus' histogram_quantile does;
    NaN without observations; the highest finite bound when it falls in the +Inf bucket."""
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(bound):
                return lower
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cumulative
    return lower

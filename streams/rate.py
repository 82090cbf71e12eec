"""Token buckets for activity rate limits, with time passed in: the same arithmetic serves a worker's own limit
(`Worker(max_activities_per_second=)`) and the servers' per-queue limiter, and tests drive it without a clock."""

from __future__ import annotations

from dataclasses import dataclass

# A bucket holds at most this many seconds of its rate (and never less than one token): a queue idle for a minute
# must not then release a minute's worth at once, which is exactly the burst a downstream API is protected from.
BURST_S = 0.1


@dataclass(slots=True)
class TokenBucket:
    """`rate` tokens per second, at most `burst` held. Starts full, so the first task goes at once."""

    rate: float
    burst: float
    tokens: float
    updated: float  # the `now` (seconds, any monotonic origin) the tokens were last counted at

    @classmethod
    def per_second(cls, rate: float, now: float, burst_s: float = BURST_S) -> TokenBucket:
        """A bucket for `rate` per second holding `burst_s` seconds of it (at least one token)."""
        if rate <= 0:
            raise ValueError(f"a rate limit must be positive, not {rate}")
        burst = max(1.0, rate * burst_s)
        return cls(rate, burst, burst, now)

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, now: float, n: int = 1) -> bool:
        """Take `n` tokens if they are there; False (taking none) if not."""
        self._refill(now)
        if self.tokens + 1e-9 >= n:
            self.tokens -= n
            return True
        return False

    def available(self, now: float) -> int:
        """Whole tokens that could be taken now."""
        self._refill(now)
        return int(self.tokens + 1e-9)

    def wait(self, now: float, n: int = 1) -> float:
        """Seconds until `n` tokens are there (0 when they are now)."""
        self._refill(now)
        missing = n - self.tokens
        return 0.0 if missing <= 1e-9 else missing / self.rate

    def set_rate(self, rate: float, now: float, burst_s: float = BURST_S) -> None:
        """A new rate (the limit changed, or this owner's share of it); tokens already earned are kept, up to the
        new burst."""
        if rate <= 0:
            raise ValueError(f"a rate limit must be positive, not {rate}")
        self._refill(now)
        self.rate = rate
        self.burst = max(1.0, rate * burst_s)
        self.tokens = min(self.tokens, self.burst)


def share(limit: float, owned: int, total: int) -> float:
    """The part of a queue's `limit` one limiter applies when it owns `owned` of the held topic's `total`
    partitions. Activity tasks are keyed per activity, so they spread evenly over the partitions and the shares
    add up to the limit; with one partition (the default) the one owner has it all."""
    if total <= 0 or owned <= 0 or limit <= 0:
        return 0.0
    return limit * min(owned, total) / total

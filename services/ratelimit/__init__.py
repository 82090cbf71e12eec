"""The servers' per-task-queue activity rate limiter (docs/architecture.md, "Rate limits")."""

"""The "Proxy check" tab: each selection score against exact per-token gradient norms."""

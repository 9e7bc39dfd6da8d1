"""How long a test waits for what should happen (a server's answer, a thread's or process's
end, an event) before it gives up: a bound for a hang, never a measure of speed.

Generous, because a shared 2-core CI machine can be many times slower than an idle one: with
eight CPU-bound loops beside the suite (load 13-15), a test that waited 15 s for a server's
answer failed, and passed with this bound under the same load. pytest-timeout (600 s per
test, pyproject.toml) bounds a whole test. A test whose subject is a timeout (a server's
header or query limit, an unreachable backend) keeps its own short value.
"""

PATIENCE_S = 300.0
PATIENCE_MS = int(PATIENCE_S * 1000)  # the same bound for Playwright, which counts milliseconds

"""How long a test waits for what should happen (a server's answer, a thread's or process's
end, an event) before it gives up: a bound for a hang, never a measure of speed.

Generous, because a shared 2-core CI machine can be many times slower than an idle one: with
eight CPU-bound loops beside the suite (load 13-15), a test that waited 15 s for a server's
answer failed, and passed with this bound under the same load. pytest-timeout (1,200 s per
test, pyproject.toml) bounds a whole test. A test whose subject is a timeout (a server's
header or query limit, an unreachable backend) keeps its own short value.
"""

PATIENCE_S = 300.0
PATIENCE_MS = int(PATIENCE_S * 1000)  # the same bound for Playwright, which counts milliseconds

# The server's own time limits a test is not about, at the same bound: a reading process's wall
# time, an analysed-run query's time and its wait for a lane, a run listing's wait for the
# index. Where the suite shares the machine (a worker gets a fraction of a core, and the
# server's reading processes run at a lower priority), the defaults (30-60 s) are hit by work
# that takes a second on an idle machine. The tests of a limit set their own value.
PATIENT_LIMITS = {
    "run_worker_wall_s": PATIENCE_S,
    "analysed_query_timeout_s": PATIENCE_S,
    "analysed_queue_wait_s": PATIENCE_S,
    "run_list_wait_s": PATIENCE_S,
}


def patient_env() -> dict[str, str]:
    """:data:`PATIENT_LIMITS` as the environment a ``gmts serve`` started by a test reads."""
    return {f"GMTS_{name.upper()}": str(value) for name, value in PATIENT_LIMITS.items()}

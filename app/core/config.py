"""Server settings: one pydantic-settings object, read from ``GMTS_*`` environment variables.

Lists accept JSON (``["a","b"]``) or a comma-separated string (``a,b``); model aliases accept
JSON (``{"name": "/path"}``) or ``name=/path,other=/path2``. Every limit here is enforced by the
service layer and answered with HTTP 413 when exceeded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gmts_core.run_limits import LIMIT_NAMES, RunLimits

_RUN = RunLimits()  # the run readers' budget: its defaults are the server's


def _split_csv(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/gmts`` (default ``~/.local/state/gmts``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gmts"


class Settings(BaseSettings):
    """Every knob of the server; see docs/settings.md."""

    model_config = SettingsConfigDict(env_prefix="GMTS_", extra="ignore")

    # --- serving ---
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    api_url: str | None = Field(
        None, description="A remote GMTS backend for the UI (the UI then calls its HTTP API)."
    )
    ui_enabled: bool = True
    log_level: str = "info"

    # --- models ---
    default_model: str = "tiny-arith"
    model_aliases: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    model_roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    allow_hub_models: bool = False
    trust_remote_code: bool = False
    device: str = "auto"
    dtype: str = "auto"
    max_loaded_models: int = Field(2, ge=1)
    torch_threads: int | None = Field(None, ge=1, le=1024)

    # --- security ---
    api_key: SecretStr | None = None
    login_attempts_per_minute: int = Field(
        10, ge=1, description="Failed UI logins allowed per client address and minute."
    )
    key_failures_per_minute: int = Field(
        20,
        ge=1,
        description="Requests with a wrong or missing /v1 key allowed per client address and "
        "minute; beyond, 429 with Retry-After.",
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Addresses (or networks, 10.0.0.0/8) of reverse proxies whose "
        "X-Forwarded-For names the client; empty: the header is ignored and the connection's "
        "address is the client (for the per-client limits).",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names the server answers to (Host, and X-Forwarded-Host from a "
        "trusted proxy); others get 400. Empty: the loopback names (127.0.0.1, localhost, ::1) "
        "and GMTS_HOST when it names one interface; `*`: any.",
    )
    max_header_bytes: int = Field(
        16_384, ge=1024, le=1_048_576, description="Request line and headers of one request."
    )
    max_headers: int = Field(100, ge=8, le=10_000, description="Headers of one request.")
    header_timeout_s: float = Field(
        10.0,
        ge=1,  # below, a loaded machine could close a client before its head arrives
        le=3600,
        description="A connection that has not sent a whole request head this long after it "
        "opened (or after its last response) is closed.",
    )

    body_timeout_s: float = Field(
        30.0,
        ge=1,
        le=3600,
        description="A request body not received whole this long after its head is cut off "
        "(its connection closed): slow-body clients cannot hold sockets.",
    )
    max_connections_per_client: int = Field(
        64, ge=1, le=100_000, description="Open connections from one client address."
    )
    max_connections: int = Field(
        1024, ge=1, le=1_000_000, description="Open connections in all (more are closed)."
    )

    # --- limits (per request) ---
    max_body_bytes: int = Field(1_000_000, ge=1)
    # --- the UI's own routes (/ui): request bodies and file uploads ---
    ui_max_body_bytes: int = Field(2_000_000, ge=1, description="Any /ui request body.")
    ui_upload_max_bytes: int = Field(
        1_000_000, ge=1, description="One UI file upload (the Compare tab's compare.json)."
    )
    ui_uploads_per_client: int = Field(
        10, ge=1, description="UI uploads per client address within GMTS_UI_UPLOAD_TTL_S."
    )
    ui_upload_ttl_s: float = Field(
        600.0, gt=0, description="Uploaded files are deleted after this long."
    )
    max_prompt_chars: int = Field(8_000, ge=1)
    max_answer_chars: int = Field(16_000, ge=1)
    max_groups: int = Field(32, ge=1)
    max_answers: int = Field(64, ge=1)  # all groups together
    max_new_tokens: int = Field(256, ge=1)
    max_total_tokens: int = Field(32_768, ge=1)  # prompt + answer tokens of all answers
    max_top_alternatives: int = Field(20, ge=0)
    max_eval_answers: int = Field(512, ge=1)  # problems x samples of one evaluate request
    reward_budget_s: float = Field(
        5.0,
        gt=0,
        description="Total time the reward rules of one request (one step of a session step "
        "request) may take.",
    )

    # --- heavy jobs (model loading and analysis) ---
    max_concurrent_jobs: int = Field(1, ge=1)
    max_queued_jobs: int = Field(8, ge=0)
    max_jobs_per_client: int = Field(
        4,
        ge=1,
        description="Heavy jobs one API client (its address, see GMTS_TRUSTED_PROXIES) may have "
        "running or waiting at once; one more is a 429, so no client fills the job queue "
        "others wait in. The UI's own handlers wait in the queue instead.",
    )
    retry_after_s: int = Field(5, ge=1)
    shutdown_grace_s: float = Field(
        10.0,
        ge=0,
        description="On SIGTERM, running requests get this long; then their jobs are cancelled "
        "(they stop at the next stage boundary) and the process exits.",
    )
    ui_queue_wait_s: float = Field(
        900.0,
        ge=0,
        description="How long the UI waits in the queue for a job slot before giving up.",
    )

    # --- live RL sessions ---
    session_ttl_s: float = Field(1800.0, gt=0, description="A session unused this long expires.")
    # beyond either cap, the least recently used idle session is evicted
    max_sessions: int = Field(64, ge=1)
    max_sessions_per_client: int = Field(
        8,
        ge=1,
        description="Sessions one client (its address, see GMTS_TRUSTED_PROXIES) may hold; "
        "beyond, 429. Making room evicts the client's own idle sessions first, another "
        "client's only when that one holds more.",
    )
    session_memory_mb: float = Field(
        2048.0,
        gt=0,
        description="Memory all sessions together may hold (trainable weights, their start "
        "copy, gradients and AdamW state: about 5 x 4 bytes per trainable parameter).",
    )
    max_session_steps: int = Field(30, ge=1)  # GRPO steps per step request
    # one training step (sessions, Train and Compare tabs) samples but returns few tokens, so its
    # limits are apart from an analysis's: they allow the demo recipe (64 prompts x G = 8)
    max_step_prompts: int = Field(64, ge=1)  # demo prompts per training step
    max_step_answers: int = Field(512, ge=1)  # prompts x G per training step
    session_state_dir: Path | None = Field(
        default_factory=lambda: default_state_dir() / "sessions",
        description="Where sessions are saved (after every step) and restored from on start; "
        "empty: sessions live in memory only and a restart loses them.",
    )
    session_policy: Literal["auto", "full", "lora"] = "auto"
    session_lora_threshold: int = Field(100_000_000, ge=0)  # parameters; auto: LoRA above it

    # --- training runs (GET /v1/runs, the Runs tab) ---
    run_roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    run_max_step_answers: int = Field(256, ge=1)  # larger steps: use `gmts analyze-run`
    run_overview_steps: int = Field(200, ge=1)  # steps summarised per run (evenly spaced)
    # what one reading of a run file may touch, checked while streaming (413 past it); see
    # gmts_core.run_limits.RunLimits. `gmts analyze-run` has larger defaults (--run-max-*).
    run_max_file_bytes: int = Field(_RUN.max_file_bytes, ge=1)  # one file of a run
    run_max_line_bytes: int = Field(_RUN.max_line_bytes, ge=1)  # one JSONL line
    run_max_step_bytes: int = Field(_RUN.max_step_bytes, ge=1)  # one step's file / lines / columns
    run_max_field_chars: int = Field(_RUN.max_field_chars, ge=1)  # one prompt or completion
    run_max_group_answers: int = Field(_RUN.max_group_answers, ge=1)  # answers of one group
    run_max_step_rows: int = Field(_RUN.max_step_rows, ge=1)  # lines / rows / samples per step
    run_max_folder_entries: int = Field(_RUN.max_folder_entries, ge=1)  # entries per folder
    run_max_run_steps: int = Field(_RUN.max_run_steps, ge=1)  # steps of one run (JSONL index)
    run_metrics_steps: int = Field(
        40, ge=1, description="Steps of a run analysed in the background for its metrics charts."
    )
    run_metrics_runs: int = Field(
        8, ge=1, description="Runs whose background metrics are kept (least recently used go)."
    )
    run_metrics_idle_s: float = Field(
        120.0, gt=0, description="Background metrics stop when nobody asked for them this long."
    )
    run_list_wait_s: float = Field(
        2.0, ge=0, le=600, description="A run listing waits this long for runs being indexed."
    )
    # run files are parsed in worker processes under these hard limits (gmts_core.runs.worker)
    run_workers: int = Field(2, ge=1, le=64, description="Run-file reading processes.")
    run_worker_memory_mb: int = Field(
        4096, ge=256, le=1 << 20, description="Address space of one run-file reading process."
    )
    run_worker_cpu_s: int = Field(
        60, ge=1, le=86_400, description="CPU seconds one run-file reading may take."
    )
    run_worker_wall_s: float = Field(
        60.0, gt=0, le=86_400, description="Seconds one run-file reading may take."
    )
    run_worker_open_files: int = Field(
        64, ge=16, le=65_536, description="Open files of one run-file reading process."
    )

    # analysed runs (`gmts analyze-run -o` folders under a run root) are queried with DuckDB
    analysed_query_threads: int = Field(
        2, ge=1, le=256, description="Threads one analysed-run query may use."
    )
    analysed_query_memory_mb: int = Field(
        1024, ge=64, le=1 << 20, description="Memory one analysed run's queries may hold."
    )
    analysed_max_concurrent: int = Field(
        2,
        ge=1,
        le=64,
        description="Analysed-run queries running at once in each lane (a step's views; "
        "run-wide rankings): each in a reading process of its own.",
    )
    analysed_queue_wait_s: float = Field(
        30.0, ge=0, le=3600, description="How long a query waits for its lane (then 429)."
    )
    analysed_query_timeout_s: float = Field(
        30.0,
        gt=0,
        le=86_400,
        description="Seconds one analysed-run query may take; its reading process is killed "
        "past it (and when the client goes away).",
    )
    analysed_worker_open_files: int = Field(
        131_072,
        ge=64,
        le=1 << 20,
        description="Open files of one analysed-run reading process (a run-wide query holds "
        "one per step; capped by the system's hard limit).",
    )
    analysed_max_cell_chars: int = Field(
        16_000,
        ge=100,
        le=1_000_000,
        description="Longest text (an answer, a prompt) an analysed-run response carries; "
        "longer ones are cut, with a marker giving their length.",
    )

    @property
    def run_limits(self) -> RunLimits:
        """The run readers' budget from the ``run_max_*`` settings."""
        return RunLimits(**{f: getattr(self, f"run_{f}") for f in LIMIT_NAMES})

    # --- exact per-token gradients (POST /v1/gradcheck) ---
    gradcheck_max_parameters: int = Field(20_000_000, ge=1)  # larger models are refused (413)

    @field_validator(
        "model_roots",
        "run_roots",
        "cors_origins",
        "trusted_proxies",
        "allowed_hosts",
        mode="before",
    )
    @classmethod
    def _parse_list(cls, value: Any) -> Any:
        return _split_csv(value)

    @field_validator("session_state_dir", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("model_aliases", mode="before")
    @classmethod
    def _parse_aliases(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("{"):
                return json.loads(text)
            pairs = [p.split("=", 1) for p in text.split(",") if p.strip()]
            if any(len(p) != 2 for p in pairs):
                raise ValueError("model_aliases: use JSON or name=path,name2=path2")
            return {k.strip(): v.strip() for k, v in pairs}
        return value

    @property
    def allowed_host_names(self) -> list[str]:
        """GMTS_ALLOWED_HOSTS, or the loopback names plus GMTS_HOST (unless a wildcard bind)."""
        if self.allowed_hosts:
            return list(self.allowed_hosts)
        names = ["127.0.0.1", "localhost", "::1"]
        if self.host not in ("0.0.0.0", "::", "", *names):
            names.append(self.host)
        return names

    @property
    def api_key_value(self) -> str | None:
        return self.api_key.get_secret_value() if self.api_key else None

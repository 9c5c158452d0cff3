# The inference worker on CPU (torch's CPU build, as the Makefile installs it), run as a
# non-root user. It also carries scripts/fetch-demo-model.sh for compose's fetch-model job.

FROM python:3.11.13-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The CPU kernels (inference/kernels/cpu) are C compiled at start-up for the processor the
# worker runs on: a C compiler with OpenMP comes along. DL3008 (pin apt versions) ignored:
# Debian's archive drops superseded versions, so a pin breaks the build at the next
# security update; the base image tag is what is pinned.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --create-home --shell /usr/sbin/nologin enclave
WORKDIR /app
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY pyproject.toml README.md ./
COPY gateway/ gateway/
COPY inference/ inference/
RUN pip install -e . \
    && python -c "import sys, torch; sys.exit('expected the CPU build of torch' if torch.version.cuda else 0)"
COPY scripts/fetch-demo-model.sh scripts/
# The models and cache volumes take these directories' owner when first mounted. /cache
# holds the start-up caches (prepared weights, compiled kernels): a recreated container
# starts warm.
RUN install -d -o enclave -g enclave -m 0700 /models /cache
ENV INFERENCE_CACHE_DIR=/cache
USER 10001:10001
EXPOSE 8100
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8100/ready', timeout=3)"]
CMD ["python", "-m", "inference", "serve", "--model", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "--host", "0.0.0.0", "--port", "8100", "--api-key-env", "ENCLAVE_WORKER_TOKEN"]

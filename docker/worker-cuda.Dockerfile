# The inference worker on NVIDIA GPUs: a pinned CUDA runtime base, Python 3.11 from the
# distribution, torch's CUDA 12.8 build, run as a non-root user.

FROM nvidia/cuda:12.8.1-runtime-ubuntu22.04
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Triton compiles its kernel launchers with a C compiler against Python's headers when the
# worker starts, and caches them under the user's home (created below).
# DL3008 (pin apt versions) ignored: Ubuntu's archive drops superseded versions, so a pin
# breaks the build at the next security update; the base image tag is what is pinned.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3.11 python3.11-venv python3.11-dev gcc libc6-dev ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3.11 -m venv /opt/venv \
    && useradd --system --uid 10001 --user-group --create-home --shell /usr/sbin/nologin enclave
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
RUN pip install --index-url https://download.pytorch.org/whl/cu128 torch==2.13.0
COPY pyproject.toml README.md ./
COPY gateway/ gateway/
COPY inference/ inference/
# The models and cache volumes take these directories' owner when first mounted; /cache
# holds the start-up caches (prepared weights, compiled kernels).
RUN pip install -e . \
    && install -d -o enclave -g enclave -m 0700 /models /cache
ENV INFERENCE_CACHE_DIR=/cache
USER 10001:10001
EXPOSE 8100
HEALTHCHECK --interval=10s --timeout=5s --start-period=900s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8100/ready', timeout=3)"]
CMD ["python", "-m", "inference", "serve", "--model", "/models/model", "--host", "0.0.0.0", "--port", "8100", "--api-key-env", "ENCLAVE_WORKER_TOKEN"]

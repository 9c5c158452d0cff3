# The gateway: the web app built in a Node stage, then the project on a slim Python image,
# run as a non-root user. Built from the repository root (compose.yaml: context ".").

FROM node:20.19.5-bookworm-slim AS ui
WORKDIR /src/admin-ui
COPY admin-ui/package.json admin-ui/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY admin-ui/ ./
RUN npm run build

FROM python:3.11.13-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin enclave
WORKDIR /app
# The project depends on torch (the worker's); the gateway never runs it, so the small CPU
# build is taken, the same one the Makefile installs.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY pyproject.toml README.md alembic.ini ./
COPY gateway/ gateway/
COPY inference/ inference/
COPY migrations/ migrations/
# Editable: `enclave migrate` finds migrations/ and the gateway admin-ui/build beside the
# packages, at the repository root (/app), as in a checkout.
RUN pip install -e .
COPY --from=ui /src/admin-ui/build admin-ui/build
RUN install -d -o enclave -g enclave -m 0700 /var/lib/enclave
USER 10001:10001
ENV ENCLAVE_HOST=0.0.0.0 \
    ENCLAVE_PORT=8000 \
    ENCLAVE_DATA_DIR=/var/lib/enclave
VOLUME ["/var/lib/enclave"]
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=3)"]
CMD ["enclave", "serve"]

# syntax=docker/dockerfile:1
# warptd container image.
#   docker build -t warptd .                    # default target: telemetry only, no torch, non-root
#   docker build --target stress -t warptd:stress .   # adds torch for POST /stress
# Every vendor SDK is in the image; the host provides the driver libraries (NVIDIA container toolkit,
# ROCm libamd_smi.so, libhlml.so). NVIDIA: docker run --gpus all -p 9465:9465 warptd
ARG PYTHON_VERSION=3.12

FROM python:${PYTHON_VERSION}-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY warptd ./warptd
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/warptd \
 && /opt/warptd/bin/pip install --no-cache-dir --find-links /wheels "warptd[nvidia,amd,gaudi,tenstorrent,tpu,kubernetes]"

FROM build AS build-stress
RUN /opt/warptd/bin/pip install --no-cache-dir --find-links /wheels "warptd[nvidia,amd,gaudi,tenstorrent,tpu,kubernetes,stress]"

FROM python:${PYTHON_VERSION}-slim AS base
LABEL org.opencontainers.image.title="warptd" \
      org.opencontainers.image.description="Vendor-agnostic accelerator telemetry daemon for Prometheus" \
      org.opencontainers.image.source="https://github.com/warptd/warptd" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
ENV PATH=/opt/warptd/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    WARPTD_LOG_FORMAT=json \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility,compute
EXPOSE 9465
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:9465/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["warptd"]
CMD ["serve"]

FROM base AS stress
COPY --from=build-stress /opt/warptd /opt/warptd
USER 65534:65534

# The default target (last stage): telemetry only.
FROM base AS runtime
COPY --from=build /opt/warptd /opt/warptd
USER 65534:65534

# Kernel Explorer on an NVIDIA GPU host.
#   docker build -t kernel-explorer .
#   docker run --gpus all -p 8000:8000 -e KERNEL_EXPLORER_TOKEN=... -v kernel-explorer:/data kernel-explorer
#
# CUDA version: tinygrad's CUDA device compiles kernels with NVRTC to PTX, and the host driver JIT-compiles that PTX; a driver
# cannot load PTX from a newer NVRTC. So pick CUDA_VERSION no newer than the CUDA version `nvidia-smi` prints on the host
# (12.2 needs driver 535 or newer; --build-arg CUDA_VERSION=12.4.1 for 550+, 12.6.3 for 560+).
ARG CUDA_VERSION=12.2.2
FROM ghcr.io/astral-sh/uv:0.8.22 AS uv

# the -base image has only the CUDA runtime (libcudart): NVRTC is installed below, explicitly, rather than pulling in the
# multi-GB -runtime/-devel images. libcuda itself comes from the host driver (the NVIDIA container toolkit, --gpus).
FROM nvidia/cuda:${CUDA_VERSION}-base-ubuntu22.04
ARG CUDA_VERSION
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# NVRTC (libnvrtc.so.12, which tinygrad finds in /usr/local/cuda/targets/*/lib); the CUDA headers on tinygrad's include path
# /usr/local/cuda/include (cuda_fp16.h, cuda_bf16.h from cudart-dev, nv/target from cccl: NVRTC 12.2 also has fp16 built in);
# clang for tinygrad's CPU device; graphviz for the graphs. The package suffix (12-2) comes from CUDA_VERSION; package versions
# follow it and Ubuntu's archive.
# hadolint ignore=DL3008
RUN set -eux; pkg="$(echo "${CUDA_VERSION%.*}" | tr . -)"; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      "cuda-nvrtc-${pkg}" "cuda-cudart-dev-${pkg}" "cuda-cccl-${pkg}" clang graphviz fonts-dejavu-core ca-certificates; \
    rm -rf /var/lib/apt/lists/*

# Python 3.11 (Ubuntu 22.04 ships 3.10): uv installs a standalone CPython build into /opt/python and the venv into /opt/venv
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_PYTHON_INSTALL_DIR=/opt/python UV_LINK_MODE=copy UV_COMPILE_BYTECODE=1 UV_NO_CACHE=1 \
    VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
RUN uv venv --python 3.11 /opt/venv

COPY . /src
# the hash-checked versions the project was tested with (requirements.lock), then the package without resolving anything again
RUN uv pip install --python /opt/venv/bin/python --require-hashes -r /src/requirements.lock && \
    uv pip install --python /opt/venv/bin/python --no-deps /src && rm -rf /src

# build-time check, no GPU needed: tinygrad finds NVRTC and compiles a float16 kernel for sm_90 (fails the build otherwise)
RUN python -c "from tinygrad.runtime.support.compiler_cuda import NVRTCCompiler as C; \
src = '#include <cuda_fp16.h>\nextern \"C\" __global__ void k(half* a) { a[0] = a[0] + (half)1.0f; }'; \
assert b'.entry k' in C('sm_90').compile(src); print('nvrtc ok')"

# traces (SQLite, XDG_DATA_HOME) and the roofline probe's cache (XDG_CACHE_HOME) live in /data: mount a volume there
RUN useradd --create-home --uid 1000 explorer && mkdir -p /data && chown explorer /data
ENV XDG_DATA_HOME=/data XDG_CACHE_HOME=/data/cache PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
VOLUME /data
USER 1000
WORKDIR /data
EXPOSE 8000

# listening beyond loopback needs an access token: pass it with -e KERNEL_EXPLORER_TOKEN=... (never bake it into the image).
# The default device is the best one tinygrad opens (NV or CUDA on an NVIDIA host); -e DEV=CUDA pins CUDA.
CMD ["kernel-explorer", "serve", "--host", "0.0.0.0", "--port", "8000"]

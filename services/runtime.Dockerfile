# veri/runtime — one image for all of veri's own services (policy hf backend, proxy, launcher,
# trainer, console): python3 + veri's dependencies (CPU torch only) from vendor/wheels/runtime,
# installed offline, + the veri package (editable install of /src, so every file under services/
# ships). Build: make images. It lives here, not in services/docker/: the editable install puts
# services/ on sys.path, where a docker/ folder would shadow the Docker SDK.
ARG OS_IMAGE=veri/os-base

FROM ${OS_IMAGE} AS deps
COPY vendor/wheels/runtime /wheels
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheels -r /wheels/requirements.txt

FROM ${OS_IMAGE}
COPY --from=deps /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml /src/pyproject.toml
COPY services /src/services
RUN pip install --no-cache-dir --no-index --no-deps --no-build-isolation -e /src \
 && python3 -c 'import torch, veri.cli; assert "+cpu" in torch.__version__, torch.__version__' \
 && veri --help >/dev/null
WORKDIR /src
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["veri", "--help"]

# veri/runtime — one image for all of veri's own services (policy hf backend, proxy, launcher,
# trainer, console): python3 + veri's dependencies (CPU torch only) from vendor/wheels/runtime,
# installed offline (served on the build's loopback), + the veri package (editable install of /src, so every file under services/
# ships). Build: make images. It lives here, not in services/docker/: the editable install puts
# services/ on sys.path, where a docker/ folder would shadow the Docker SDK.
ARG OS_IMAGE=veri/os-base

FROM ${OS_IMAGE}
# The wheels come over the build's loopback (scripts/docker/serve-vendor.py), not a COPY: no second
# copy of them, nor of the venv, in the image store. The proxy variables are for the loopback only.
ARG VENDOR_URL
RUN test -n "$VENDOR_URL" || { echo "build with make images (VENDOR_URL: vendored wheels)" >&2; exit 1; }; \
    python3 -m venv /opt/venv \
 && NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 /opt/venv/bin/pip install --no-cache-dir --no-index \
      --find-links "$VENDOR_URL/wheels/" -r "$VENDOR_URL/wheels/requirements.txt"
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml LICENSE /src/
COPY services /src/services
# veri's licence (also in the package's metadata: pip show -f veri) and what this image carries, under which
# licences (docs/licences.md)
COPY LICENSE docs/licences.md /usr/share/doc/veri/
RUN pip install --no-cache-dir --no-index --no-deps --no-build-isolation -e /src \
 && python3 -c 'import torch, veri.cli; assert "+cpu" in torch.__version__, torch.__version__' \
 && veri --help >/dev/null
WORKDIR /src
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["veri", "--help"]

# The local image an unreachable `FROM ubuntu:24.04` is mapped to (experiment): veri/os-base (Debian
# bookworm), with pip pointed at the build proxy's index. apt keeps Debian's own sources: the proxy
# answers them from the vendored, signed indexes.
FROM veri/os-base
RUN echo 'Acquire::Languages "none";' >/etc/apt/apt.conf.d/99veri-offline \
 && printf '[global]\nindex-url = http://pypi.veri.internal/simple/\ntrusted-host = pypi.veri.internal\n' >/etc/pip.conf

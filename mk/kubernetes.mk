# Kubernetes 1.20 for the test control plane (tests/kubernetes), built from Debian's source package.
#   make k8s    kube-apiserver, -controller-manager, -scheduler, kubelet + etcd, kubectl into build/k8s/bin
#               (scripts/k8s/build.sh: ~7 min cold on 2 cores, seconds when cached)
# `make test` starts the same build in the background at nice 10 (k8s-binaries-bg) so it overlaps the other tests;
# tests/kubernetes run last and wait for it (log: build/k8s/build.log).

.PHONY: k8s k8s-binaries-bg k8s-registry

TEST_DEPS += k8s-binaries-bg
TEST_PREPARED += k8s-registry

k8s: ## Kubernetes 1.20 (apiserver, controller-manager, scheduler, kubelet, etcd, kubectl) from Debian's source into build/k8s/bin
	@scripts/k8s/build.sh

k8s-binaries-bg: ## internal: make test's background make k8s
	@mkdir -p build/k8s
	@setsid nohup nice -n 10 scripts/k8s/build.sh >build/k8s/build.log 2>&1 </dev/null &
	@echo "k8s: building in the background (build/k8s/build.log); tests/kubernetes wait for it"

# Debian's docker-registry: the private registry tests/kubernetes/test_backend_registry.py pushes to and
# the kubernetes launcher reads bundle labels from (on loopback; the tests start and stop their own).
k8s-registry: ## internal: the private registry the kubernetes tests push to (make test installs it)
	@command -v docker-registry >/dev/null || { mkdir -p build/k8s && \
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
		docker-registry \
		>build/k8s/apt-registry.log 2>&1 || { tail -20 build/k8s/apt-registry.log; exit 1; }; }

# Kubernetes 1.20 for the test control plane (tests/kubernetes), built from Debian's source package.
#   make k8s    kube-apiserver, -controller-manager, -scheduler, kubelet + etcd, kubectl into build/k8s/bin
#               (scripts/k8s/build.sh: ~7 min cold on 2 cores, seconds when cached)
# `make test` starts the same build in the background (k8s-binaries-bg) so it overlaps the other tests;
# tests/kubernetes run last and wait for it (log: build/k8s/build.log).

.PHONY: k8s k8s-binaries-bg

TEST_DEPS += k8s-binaries-bg

k8s:
	@scripts/k8s/build.sh

k8s-binaries-bg:
	@mkdir -p build/k8s
	@setsid nohup scripts/k8s/build.sh >build/k8s/build.log 2>&1 </dev/null &
	@echo "k8s: building in the background (build/k8s/build.log); tests/kubernetes wait for it"

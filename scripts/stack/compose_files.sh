# Sourced by up.sh and train.sh: the compose files of the stack's launcher backend.
#   VERI_LAUNCHER_BACKEND=docker (default): compose.yaml, one runsc container per rollout.
#   VERI_LAUNCHER_BACKEND=kubernetes: + compose.kubernetes.yaml, one Job per rollout on the cluster of
#     VERI_LAUNCHER_KUBECONFIG (namespace VERI_LAUNCHER_NAMESPACE), its pods reaching this box's proxy
#     and web fixture at VERI_K8S_STACK_ADDRESS (port VERI_K8S_PROXY_PORT); see that file.
# Harbor tasks' build folder (tools/tasks/stage.py): the launcher mounts it at this same absolute path.
VERI_TASKS_BUILD=$(realpath -m "${VERI_TASKS_BUILD:-build/tasks}")
mkdir -p "$VERI_TASKS_BUILD"  # made by us, not by dockerd as root
export VERI_TASKS_BUILD
case ${VERI_LAUNCHER_BACKEND:-docker} in
  docker)
    unset VERI_K8S_PROXY_PORT  # rollout URLs stay http://proxy:8000 (compose.yaml)
    ;;
  kubernetes)
    if [ ! -f "${VERI_LAUNCHER_KUBECONFIG:-}" ]; then
      echo "make up: VERI_LAUNCHER_BACKEND=kubernetes needs VERI_LAUNCHER_KUBECONFIG=FILE, a kubeconfig whose" \
        "server the launcher container reaches (not 127.0.0.1); got '${VERI_LAUNCHER_KUBECONFIG:-}'" >&2
      exit 1
    fi
    if [ -z "${VERI_K8S_STACK_ADDRESS:-}" ]; then
      echo "make up: VERI_LAUNCHER_BACKEND=kubernetes needs VERI_K8S_STACK_ADDRESS: an address of this machine" \
        "the cluster's pods reach (for a kubelet on this machine, its pods' gateway, e.g. docker0's 172.17.0.1)" >&2
      exit 1
    fi
    VERI_LAUNCHER_KUBECONFIG=$(realpath "$VERI_LAUNCHER_KUBECONFIG")
    export VERI_LAUNCHER_KUBECONFIG VERI_K8S_STACK_ADDRESS VERI_K8S_PROXY_PORT=${VERI_K8S_PROXY_PORT:-8000}
    case :${COMPOSE_FILE:-compose.yaml}: in
      *:compose.kubernetes.yaml:*) ;;
      *) export COMPOSE_FILE=${COMPOSE_FILE:-compose.yaml}:compose.kubernetes.yaml ;;
    esac
    ;;
  *)
    echo "make up: VERI_LAUNCHER_BACKEND=$VERI_LAUNCHER_BACKEND: the stack's launcher is docker or kubernetes" >&2
    exit 1
    ;;
esac

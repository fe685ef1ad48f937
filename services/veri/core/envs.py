"""Every environment variable veri reads or sets, in one place (name -> meaning).

tests/core/test_envs.py fails when services/, compose.yaml, scripts/, mk/ or the Makefile name a
VERI_* variable that is not declared here (a VERI_PROXY_<FIELD> / VERI_LAUNCHER_<FIELD> name must be
a field of ProxySettings / LauncherSettings)."""

# --- read by veri's own services -------------------------------------------------------------
VERI_CONTROL_TOKEN = "VERI_CONTROL_TOKEN"  # bearer token for the proxy's /control routes
VERI_HOME = "VERI_HOME"  # state folder of a running stack (control token, stores)
VERI_PROXY_URL = "VERI_PROXY_URL"  # `veri train`: the capture proxy's URL (default http://127.0.0.1:8000)
VERI_POLICY_URL = "VERI_POLICY_URL"  # `veri train`: the policy server's URL (default http://127.0.0.1:8001)
VERI_LAUNCHER_URL = "VERI_LAUNCHER_URL"  # `veri train --sandbox launcher`: the launcher service's URL
# The capture proxy reads each ProxySettings field from VERI_PROXY_<FIELD> (flags win), e.g.
# VERI_PROXY_POLICY_URL, VERI_PROXY_POLICY_URLS (a JSON list: one replica per server),
# VERI_PROXY_DATA_PARALLEL_SIZE (vLLM DP ranks per server).
VERI_PROXY_PREFIX = "VERI_PROXY_"
# The launcher reads each LauncherSettings field from VERI_LAUNCHER_<FIELD> (flags win), e.g.
# VERI_LAUNCHER_BACKEND, VERI_LAUNCHER_OUTPUT_ROOT.
VERI_LAUNCHER_PREFIX = "VERI_LAUNCHER_"
# The GPU plan (layout.GpuLayout JSON), made once before the stack starts; containers read it, never re-plan.
VERI_GPU_PLAN = "VERI_GPU_PLAN"
VERI_RESUME_COMMAND = "VERI_RESUME_COMMAND"  # `veri train`: the resume command it prints (make train sets it)
VERI_MODEL = "VERI_MODEL"  # the job's model folder name under VERI_MODELS_DIR; `veri run-harness` model name
VERI_EGRESS_KEY = "VERI_EGRESS_KEY"  # the egress gateway's pass key (hex), made by the launcher that starts it
VERI_LOG_FORMAT = "VERI_LOG_FORMAT"  # `veri serve ...` logs: json (default, one JSON line per event) or console

# prometheus-client's multiprocess folder: `veri serve proxy` sets a fresh one per start so
# /metrics sums every worker (infra/metrics.py); an inherited one is dropped, never shared between runs.
PROMETHEUS_MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

# --- read from the machine (GPU layout probe) ------------------------------------------------
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"  # the GPUs this job may use
PYTORCH_CUDA_ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"  # the GPU trainer's allocator (appliance.policy_compose)
SLURM_JOB_NUM_NODES = "SLURM_JOB_NUM_NODES"  # set inside a SLURM allocation: more than 1 = multi-node

# --- the compose stack (compose.yaml, make up) ------------------------------------------------
VERI_ROLLOUTS_NETWORK = "VERI_ROLLOUTS_NETWORK"  # docker network of proxy, webfixture and sandboxes
VERI_STATE_DIR = "VERI_STATE_DIR"  # host folder of the stack's state (control token, spans, outputs)
VERI_POLICY_SCRIPTED_REPLIES = "VERI_POLICY_SCRIPTED_REPLIES"  # test-only teacher-forced replies (policy)
VERI_POLICY_URLS = "VERI_POLICY_URLS"  # the policy servers the proxy pins rollouts to, comma-separated (veri stack-env)
VERI_POLICY_DP_RANKS = "VERI_POLICY_DP_RANKS"  # vLLM --data-parallel-size of that one server (GPU), else 1
# The job's chat_template_kwargs (JSON) for the proxy (veri stack-env).
VERI_CHAT_TEMPLATE_KWARGS = "VERI_CHAT_TEMPLATE_KWARGS"
VERI_PROJECT = "VERI_PROJECT"  # compose project name of make up / train / down (default veri)
VERI_PROXY_PORT = "VERI_PROXY_PORT"  # host port (on 127.0.0.1) the proxy is published on (default 8000)
VERI_CONSOLE_PORT = "VERI_CONSOLE_PORT"  # host port (on 127.0.0.1) of the web console (default 8300)
VERI_CONSOLE_TOKEN = "VERI_CONSOLE_TOKEN"  # the console's token (needed when it binds a non-loopback address)
VERI_CONSOLE_HOSTS = "VERI_CONSOLE_HOSTS"  # comma-separated Host names the console answers besides loopback
# 1: the console binds 0.0.0.0 in a container whose port is published on 127.0.0.1 only (compose)
VERI_CONSOLE_LOOPBACK_PUBLISHED = "VERI_CONSOLE_LOOPBACK_PUBLISHED"
VERI_PROXY_WORKERS = "VERI_PROXY_WORKERS"  # the stack proxy's gunicorn worker processes (default 2)
VERI_RUNTIME_IMAGE = "VERI_RUNTIME_IMAGE"  # the image veri's services run in (default veri/runtime)
# Rollouts on a Kubernetes cluster (VERI_LAUNCHER_BACKEND=kubernetes, VERI_LAUNCHER_KUBECONFIG,
# VERI_LAUNCHER_NAMESPACE: compose.kubernetes.yaml):
VERI_K8S_STACK_ADDRESS = "VERI_K8S_STACK_ADDRESS"  # this machine's address the cluster's pods reach
VERI_K8S_PROXY_PORT = "VERI_K8S_PROXY_PORT"  # the proxy's rollout port published there (default 8000)
VERI_LAUNCHER_PORT = "VERI_LAUNCHER_PORT"  # host port (127.0.0.1) of the kubernetes launcher (default 8002)
# The job's stack settings, written by `veri stack-env` for make train and compose:
VERI_MODELS_DIR = "VERI_MODELS_DIR"  # host folder holding the job's model (mounted at /models)
VERI_TEMPERATURE = "VERI_TEMPERATURE"  # the job's sampling, which the proxy enforces
VERI_TOP_P = "VERI_TOP_P"
VERI_MAX_TOKENS = "VERI_MAX_TOKENS"
VERI_HOSTED_TOOLS = "VERI_HOSTED_TOOLS"  # the job's hosted_tools (drop | refuse): the proxy's --hosted-tools
VERI_BUNDLE = "VERI_BUNDLE"  # the job's harness bundle (make train builds its image)
# the make target that builds the bundle's base when it is veri's (core/harness.py BASE_IMAGE_TARGETS; "": your own)
VERI_BUNDLE_BASE_TARGET = "VERI_BUNDLE_BASE_TARGET"
VERI_POLICY_BACKEND = "VERI_POLICY_BACKEND"  # hf or vllm
VERI_JOB_FILE = "VERI_JOB_FILE"  # the job file as the trainer container reads it (a copy: veri stack-env --name)
# Harbor tasks' built trees and staged tests (default <checkout>/build/tasks): the launcher container mounts
# it read-only at the same path, so a path the host's `veri tasks stage` wrote is the launcher's too
VERI_TASKS_BUILD = "VERI_TASKS_BUILD"

# --- make's helpers (scripts/) ------------------------------------------------------------------
VERI_DISK_MIN_GB = "VERI_DISK_MIN_GB"  # make disk-check stops below this many free GB (default 1; 0 skips)
# the set-up's apt installs (make docker's packages, python3-venv, python3-pip, npm: scripts/host-packages.sh): 1
# lets make install them, 0 never; unset: where nothing else owns the host's packages (no systemd, or CI=true)
VERI_INSTALL_PACKAGES = "VERI_INSTALL_PACKAGES"
VERI_INSTALL_DOCKER = "VERI_INSTALL_DOCKER"  # VERI_INSTALL_PACKAGES's old name, still read

# --- the harness contract: set inside every rollout sandbox ---------------------------------
OPENAI_BASE_URL = "OPENAI_BASE_URL"
OPENAI_API_KEY = "OPENAI_API_KEY"
ANTHROPIC_BASE_URL = "ANTHROPIC_BASE_URL"
ANTHROPIC_API_KEY = "ANTHROPIC_API_KEY"
ANTHROPIC_AUTH_TOKEN = "ANTHROPIC_AUTH_TOKEN"
VERI_POLICY_BASE_URL = "VERI_POLICY_BASE_URL"
VERI_POLICY_MODEL = "VERI_POLICY_MODEL"
VERI_TASK_INPUT = "VERI_TASK_INPUT"
VERI_TASK = "VERI_TASK"
VERI_TASK_INDEX = "VERI_TASK_INDEX"
VERI_ROLLOUT_INDEX = "VERI_ROLLOUT_INDEX"
VERI_ROLLOUT_ID = "VERI_ROLLOUT_ID"
VERI_MAX_TURNS = "VERI_MAX_TURNS"
VERI_OUTPUT_DIR = "VERI_OUTPUT_DIR"
# Every variable a launch request may set (the launcher adds the egress ones below itself).
HARNESS_CONTRACT = frozenset({
    OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN,
    VERI_POLICY_BASE_URL, VERI_POLICY_MODEL, VERI_TASK_INPUT, VERI_TASK, VERI_TASK_INDEX, VERI_ROLLOUT_INDEX,
    VERI_ROLLOUT_ID, VERI_MAX_TURNS, VERI_OUTPUT_DIR,
})
# Set for bundles with egress "open" or a host list (core/egress.py): the egress gateway, with the
# sandbox's pass; the capture proxy's host in NO_PROXY. Both spellings: curl reads only lower-case http_proxy.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
NO_PROXY_VARIABLES = ("NO_PROXY", "no_proxy")

# --- the URL-extraction demo (not part of the harness contract) -------------------------------
VERI_WEBFIXTURE_URL = "VERI_WEBFIXTURE_URL"  # base URL `veri data url-extract` builds page URLs on (default http://webfixture:8080)

# --- read by the test suite (make test sets the first three) ------------------------------------
VERI_TINY_MODEL = "VERI_TINY_MODEL"  # the tiny test model's folder
VERI_CLAUDE_BIN = "VERI_CLAUDE_BIN"  # the Claude Code binary the proxy tests drive
VERI_CODEX_BIN = "VERI_CODEX_BIN"  # the Codex CLI binary the proxy tests drive
VERI_REQUIRE_SANDBOX = "VERI_REQUIRE_SANDBOX"  # 1: a missing gVisor sandbox fails tests/sandbox, not skips

"""Harbor task folders: the published `task.toml` schema (1.0 to 1.4), reading a task, and what veri refuses.

A task folder is `task.toml`, `instruction.md`, `tests/test.sh`, `environment/` (a Dockerfile, or only
`[environment] docker_image`) and `solution/solve.sh`. The schema mirrors Harbor's own pydantic model
(harbor `src/harbor/models/task/config.py`; Harbor's package needs Python >= 3.12, so it is not a
dependency): deprecated spellings (`version`, `memory = "2G"`, `storage`, `allow_internet`) are read and
normalised; keys Harbor would ignore are kept and named (`unknown_keys`), never dropped silently.
`check_task` returns what veri cannot run (multi-step, sidecars, MCP servers, accelerators, Windows, a
separate verifier, host variables) as `Problem`s naming the task, the field and the fix; `task_notes` what
it reads and does not act on. Design: docs/design/harbor-tasks.md; reference: docs/reference/harbor-task.md.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from veri.core.problems import Problem, ProblemsError

TASK_FILE = "task.toml"
INSTRUCTION_FILE = "instruction.md"
TEST_SCRIPT = "tests/test.sh"
DOCKERFILE = "environment/Dockerfile"
COMPOSE_FILES = ("environment/docker-compose.yaml", "environment/docker-compose.yml")
NEWEST_SCHEMA = (1, 4)  # the newest schema_version this model was written against
REFERENCE = "docs/reference/harbor-task.md"

# The dataset columns a Harbor task row carries besides its [metadata] keys (core/dataset.py).
TASK_NAME_COLUMN = "task_name"
TASK_DIR_COLUMN = "harbor_task"

_ORG_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_HOST_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_HOST_VARIABLE = re.compile(r"\$\{[^}]*\}")
_CANARY_LINE = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


class NetworkMode(StrEnum):
    PUBLIC = "public"
    NO_NETWORK = "no-network"
    ALLOWLIST = "allowlist"


class _Table(BaseModel):
    # Harbor ignores keys it does not know; veri keeps them (model_extra) to name them.
    model_config = ConfigDict(extra="allow")


def _check_hosts(hosts: list[str] | None) -> list[str] | None:
    """Harbor's rule: hostnames or leading `*.` wildcards, lower-cased, no URLs, ports or paths."""
    if hosts is None:
        return None
    normalised = []
    for host in hosts:
        host = host.strip().lower().rstrip(".")
        bare = host[2:] if host.startswith("*.") else host
        if not bare or "*" in bare or any(c in bare for c in "/:") or not all(
            _HOST_LABEL.match(label) for label in bare.split(".")
        ):
            raise ValueError(f"{host!r} is not a hostname or a leading `*.domain` wildcard (no URLs, ports, paths)")
        normalised.append(host)
    return normalised


class _PhaseNetwork(_Table):
    network_mode: NetworkMode | None = Field(
        default=None, description="a network policy for this phase only, overriding [environment]'s"
    )
    allowed_hosts: list[str] | None = Field(default=None, description="hosts reachable when network_mode = allowlist")

    _hosts = field_validator("allowed_hosts")(_check_hosts)

    @model_validator(mode="after")
    def _hosts_need_allowlist(self) -> _PhaseNetwork:
        if self.allowed_hosts is not None and self.network_mode is not NetworkMode.ALLOWLIST:
            raise ValueError("allowed_hosts is only valid with network_mode = \"allowlist\"")
        return self


class Author(_Table):
    name: str = Field(description="the author's name")
    email: str | None = Field(default=None, description="the author's e-mail address")


class TaskInfo(_Table):
    name: str = Field(description="the registry name, `org/name`; veri's `task_name` column")
    description: str = Field(default="", description="what the task is")
    authors: list[Author] = Field(default_factory=list, description="[{name, email}]")
    keywords: list[str] = Field(default_factory=list, description="search keywords")

    @field_validator("name")
    @classmethod
    def _org_name(cls, value: str) -> str:
        if not _ORG_NAME.match(value) or ".." in value:
            raise ValueError(f"{value!r} is not `org/name` (letters, digits, `._-`)")
        return value


class AgentSection(_PhaseNetwork):
    timeout_sec: float | None = Field(
        default=None, gt=0, description="the agent's time limit; veri uses min(timeout_sec, harness_timeout_s)"
    )
    user: str | int | None = Field(default=None, description="the agent's OS user (unset: the image's USER)")


class VerifierSection(_PhaseNetwork):
    timeout_sec: float = Field(default=600.0, gt=0, description="the verifier's (test.sh's) time limit")
    env: dict[str, str] = Field(default_factory=dict, description="variables for test.sh (literal values)")
    user: str | int | None = Field(default=None, description="test.sh's OS user (unset: the image's USER)")
    environment_mode: Literal["shared", "separate"] | None = Field(
        default=None, description="shared: the verifier runs in the agent's container (veri's only mode)"
    )
    environment: dict[str, Any] | None = Field(
        default=None, description="a separate verifier container's [environment] (refused)"
    )
    collect: list[dict[str, Any]] = Field(
        default_factory=list, description="[[verifier.collect]] hooks of a separate verifier (refused)"
    )


class SolutionSection(_Table):
    env: dict[str, str] = Field(default_factory=dict, description="variables for solution/solve.sh (the oracle)")


class Healthcheck(_Table):
    command: str = Field(description="a shell command; exit 0 = ready")
    interval_sec: float = Field(default=5.0, description="seconds between tries")
    timeout_sec: float = Field(default=30.0, description="one try's time limit")
    start_period_sec: float = Field(default=0.0, description="grace period whose failures do not count")
    start_interval_sec: float = Field(default=5.0, description="seconds between tries in the grace period")
    retries: int = Field(default=3, description="consecutive failures before the task fails to start")


def _size_mb(key: str, value: Any) -> int:
    """Harbor's deprecated size strings: `2G`, `512M`, `1024K` -> MB."""
    if not isinstance(value, str):
        raise ValueError(f"{key} = {value!r} is not a size like \"2G\"; write {key}_mb = <megabytes> instead")
    text = value.strip().upper()
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}.get(text[-1:])
    try:
        if scale is None:
            raise ValueError
        return int(float(text[:-1]) * scale)
    except ValueError:
        raise ValueError(f"{key} = {value!r} is not a size like \"2G\", \"512M\" or \"1024K\"") from None


class EnvironmentSection(_Table):
    docker_image: str | None = Field(default=None, description="a prebuilt image (else environment/Dockerfile)")
    build_timeout_sec: float = Field(default=600.0, gt=0, description="the image build's time limit")
    os: Literal["linux", "windows"] = Field(default="linux", description="the container's OS (windows refused)")
    cpus: int | None = Field(default=None, ge=0, description="CPUs of the sandbox (unset: the job's limit)")
    memory_mb: int | None = Field(
        default=None, ge=0, description="memory of the sandbox in MB (older `memory = \"2G\"` read as this)"
    )
    storage_mb: int | None = Field(
        default=None, ge=0, description="disk of the sandbox in MB (older `storage = \"10G\"` read as this)"
    )
    gpus: int | None = Field(default=None, ge=0, description="GPUs (more than 0 refused)")
    gpu_types: list[str] | None = Field(default=None, description="acceptable GPU types (refused)")
    tpu: dict[str, Any] | None = Field(default=None, description="a TPU slice (refused)")
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list, description="MCP servers (refused when any)")
    env: dict[str, str] = Field(
        default_factory=dict, description="variables of the container (literal values; `${VAR}` refused)"
    )
    skills_dir: str | None = Field(default=None, description="skills copied to the agent (ignored, named)")
    healthcheck: Healthcheck | None = Field(default=None, description="readiness check before the agent starts")
    workdir: str | None = Field(default=None, description="cwd of agent and verifier (unset: the image's WORKDIR)")
    network_mode: NetworkMode = Field(default=NetworkMode.PUBLIC, description="the task's network policy")
    allowed_hosts: list[str] | None = Field(default=None, description="hosts reachable when network_mode = allowlist")
    allow_internet: bool | None = Field(
        default=None, description="deprecated: false = network_mode \"no-network\", true = \"public\""
    )

    _hosts = field_validator("allowed_hosts")(_check_hosts)

    @field_validator("os", mode="before")
    @classmethod
    def _lower_os(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _sizes(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old in ("memory", "storage"):
            if old in data:
                value = _size_mb(old, data.pop(old))
                new = f"{old}_mb"
                if data.get(new) is not None and data[new] != value:
                    raise ValueError(f"{old} = {value} MB and {new} = {data[new]} disagree: keep only {new}")
                data[new] = value
        return data

    @model_validator(mode="after")
    def _network(self) -> EnvironmentSection:
        if self.allow_internet is not None and "network_mode" not in self.model_fields_set \
                and self.allowed_hosts is None:
            self.network_mode = NetworkMode.PUBLIC if self.allow_internet else NetworkMode.NO_NETWORK
        if self.allowed_hosts is not None and self.network_mode is not NetworkMode.ALLOWLIST:
            raise ValueError("allowed_hosts is only valid with network_mode = \"allowlist\"")
        return self


class HarborTaskConfig(_Table):
    """A `task.toml`, Harbor's schema 1.0 to 1.4."""

    schema_version: str = Field(default="1.3", description="Harbor's schema version (older files: `version`)")
    source: str | None = Field(default=None, description="provenance of the task")
    task: TaskInfo | None = Field(default=None, description="[task]: the registry identity")
    metadata: dict[str, Any] = Field(default_factory=dict, description="free keys: each a dataset column")
    agent: AgentSection = Field(default_factory=AgentSection, description="[agent]")
    verifier: VerifierSection = Field(default_factory=VerifierSection, description="[verifier]")
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection, description="[environment]")
    solution: SolutionSection = Field(default_factory=SolutionSection, description="[solution]")
    steps: list[dict[str, Any]] | None = Field(default=None, description="[[steps]]: multi-step tasks (refused)")
    multi_step_reward_strategy: Literal["mean", "final"] | None = Field(
        default=None, description="a multi-step task's reward (refused)"
    )
    artifacts: list[str | dict[str, Any]] = Field(
        default_factory=list, description="files collected after the run (ignored, named)"
    )

    @model_validator(mode="before")
    @classmethod
    def _version(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            version = data.pop("version")
            data.setdefault("schema_version", str(version) if isinstance(version, int | float) else version)
        return data

    def unknown_keys(self) -> list[str]:
        """Every key Harbor's schema does not name, dotted (`environment.foo`), in file order."""
        return _extras(self, "")


def _extras(model: BaseModel, prefix: str) -> list[str]:
    found = [f"{prefix}{key}" for key in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            found += _extras(value, f"{prefix}{name}.")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, BaseModel):
                    found += _extras(item, f"{prefix}{name}[{index}].")
    return found


# Harbor's top-level keys: a task.toml with keys but none of these is some other tool's file.
_HARBOR_KEYS = frozenset(HarborTaskConfig.model_fields) | {"version", "multi_step_reward_mode"}


@dataclass(frozen=True)
class HarborTask:
    folder: Path
    name: str  # [task] name, else the folder's name
    config: HarborTaskConfig
    instruction: str  # instruction.md without its leading canary lines ("" when the file is missing)

    def has(self, relative: str) -> bool:
        return (self.folder / relative).is_file()


def strip_canary(text: str) -> str:
    """Harbor's rule: leading `<!-- ...canary... -->` / `# ...canary...` lines and the blank lines after go."""
    lines = text.split("\n")
    index = 0
    while index < len(lines) and _CANARY_LINE.match(lines[index].strip()):
        index += 1
    while index < len(lines) and not lines[index].strip():
        index += 1
    return "\n".join(lines[index:])


def load_task(folder: Path) -> HarborTask:
    """Read one task folder; raises `ProblemsError` naming every problem of its `task.toml` at once."""
    folder = Path(folder)
    label = folder.name
    path = folder / TASK_FILE
    if not path.is_file():
        raise ProblemsError(str(folder), [Problem(label, f"has no {TASK_FILE}",
                                                  "point at a Harbor task folder (task.toml, instruction.md,"
                                                  " tests/test.sh) or a folder of them")])
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ProblemsError(str(folder), [Problem(f"{label}: {TASK_FILE}", f"cannot be read: {error}",
                                                  "fix the TOML at the place named")]) from error
    if raw and not _HARBOR_KEYS & set(raw):
        raise ProblemsError(str(folder), [Problem(
            f"{label}: {TASK_FILE}", f"is not Harbor's task.toml (its keys: {sorted(raw)})",
            f"Harbor's task.toml has [task], [metadata], [agent], [verifier], [environment], [solution]:"
            f" see {REFERENCE}",
        )])
    try:
        config = HarborTaskConfig.model_validate(raw)
    except ValidationError as error:
        raise ProblemsError(str(folder), [_schema_problem(label, item) for item in error.errors()]) from error
    instruction = folder / INSTRUCTION_FILE
    try:
        text = strip_canary(instruction.read_text(encoding="utf-8")) if instruction.is_file() else ""
    except UnicodeDecodeError as error:
        raise ProblemsError(str(folder), [Problem(f"{label}: {INSTRUCTION_FILE}", f"is not UTF-8 text ({error})",
                                                  "save it as UTF-8")]) from error
    return HarborTask(folder=folder, name=config.task.name if config.task else label, config=config,
                      instruction=text)


def _schema_problem(label: str, error: Any) -> Problem:
    where = ".".join(str(part) for part in error["loc"] if not str(part).startswith("function-"))
    message = str(error["msg"]).removeprefix("Value error, ")
    return Problem(f"{label}: {where or TASK_FILE}", message, f"write it as Harbor's schema says ({REFERENCE})")


def find_tasks(path: Path) -> list[Path]:
    """The task folders under `path`: `path` itself (it holds task.toml), `path/*/`, or `path/tasks/*/`
    (TRL's layout), sorted; raises `ProblemsError` when there are none."""
    path = Path(path)
    if (path / TASK_FILE).is_file():
        return [path]
    for pattern in (f"*/{TASK_FILE}", f"tasks/*/{TASK_FILE}"):
        found = sorted(toml.parent for toml in path.glob(pattern))
        if found:
            return found
    what = "does not exist" if not path.exists() else f"holds no {TASK_FILE} (nor */{TASK_FILE}, tasks/*/{TASK_FILE})"
    raise ProblemsError(str(path), [Problem(str(path), what,
                                            "point at a Harbor task folder or a folder of task folders")])


def check_task(task: HarborTask) -> list[Problem]:
    """What veri cannot run in this task, each with the field and the fix (empty: runnable)."""
    label, config = task.folder.name, task.config
    env, verifier = config.environment, config.verifier
    found: list[Problem] = []

    def refuse(field: str, message: str, fix: str) -> None:
        found.append(Problem(f"{label}: {field}", message, fix))

    single = "veri runs single-step tasks: one instruction.md and tests/test.sh at the task folder's root"
    if config.steps is not None or config.multi_step_reward_strategy is not None or (task.folder / "steps").is_dir():
        refuse("steps", "is a multi-step task ([[steps]], steps/), which veri does not run", single)
    else:
        if not task.has(INSTRUCTION_FILE):
            refuse(INSTRUCTION_FILE, "is missing", "write the task's instruction (what the agent is asked) there")
        elif not task.instruction.strip():
            refuse(INSTRUCTION_FILE, "is empty", "write the task's instruction (what the agent is asked) there")
        if not task.has(TEST_SCRIPT):
            refuse(TEST_SCRIPT, "is missing", "write the verifier script; it writes /logs/verifier/reward.txt"
                                              " (or reward.json)")
    for compose in COMPOSE_FILES:
        if task.has(compose):
            refuse(compose, "declares sidecar containers, which veri does not run",
                   "veri runs one container per rollout: build what the sidecars serve into environment/Dockerfile")
    if not env.docker_image and not task.has(DOCKERFILE):
        refuse("environment.docker_image", f"is unset and there is no {DOCKERFILE}",
               f"add {DOCKERFILE} (veri builds it offline) or set [environment] docker_image")
    if env.mcp_servers:
        refuse("environment.mcp_servers", f"names {len(env.mcp_servers)} MCP server(s), which veri does not start",
               "remove [[environment.mcp_servers]]; give the agent its tools through the harness bundle")
    if env.gpus:
        refuse("environment.gpus", f"is {env.gpus}: veri's sandboxes have no accelerators", "set gpus = 0")
    if env.gpu_types:
        refuse("environment.gpu_types", "asks for GPUs: veri's sandboxes have none", "remove gpu_types")
    if env.tpu is not None:
        refuse("environment.tpu", "asks for a TPU: veri's sandboxes have none", "remove [environment.tpu]")
    if env.os != "linux":
        refuse("environment.os", f"is {env.os!r}: veri runs Linux containers only", "set os = \"linux\"")
    if verifier.environment_mode == "separate" or verifier.environment is not None or verifier.collect:
        refuse("verifier.environment_mode", "asks for a separate verifier container, which veri does not run yet",
               "use the shared verifier (remove environment_mode, [verifier.environment], [[verifier.collect]])")
    for section, values in (("environment.env", env.env), ("verifier.env", verifier.env),
                            ("solution.env", config.solution.env)):
        for key, value in values.items():
            if _HOST_VARIABLE.search(value):
                refuse(f"{section}.{key}", f"is {value!r}: the host's variables never reach a sandbox",
                       "write the literal value")
    if verifier.network_mode not in (None, NetworkMode.NO_NETWORK):
        refuse("verifier.network_mode", f"is {verifier.network_mode.value!r}: veri's verifier always runs offline",
               "remove it (or set \"no-network\"): test.sh gets its tools from veri's vendored set, offline")
    agent = config.agent
    if agent.network_mode is not None and (agent.network_mode, agent.allowed_hosts) != (
            env.network_mode, env.allowed_hosts):
        refuse("agent.network_mode", "differs from [environment]'s: switching networks during a task is not"
               " supported yet", "set the policy once, on [environment] network_mode / allowed_hosts")
    return found


def task_notes(task: HarborTask) -> list[str]:
    """What veri reads and does not act on, or cannot check: each a line naming the task and the field."""
    label, config = task.folder.name, task.config
    notes = [f"{label}: {key} is not a key of Harbor's schema: ignored (see {REFERENCE})"
             for key in config.unknown_keys()]
    version = _version(config.schema_version)
    if version is None or version > NEWEST_SCHEMA:
        notes.append(f"{label}: schema_version {config.schema_version!r} is newer than veri knows (1.4): read as 1.4")
    if config.environment.skills_dir:
        notes.append(f"{label}: environment.skills_dir is ignored (veri copies no skills to the agent)")
    if config.artifacts:
        notes.append(f"{label}: artifacts are ignored (the verifier runs in the agent's container)")
    if task.has(TEST_SCRIPT):
        script = (task.folder / TEST_SCRIPT).read_text(encoding="utf-8", errors="replace")
        notes += [f"{label}: {TEST_SCRIPT} {line}" for line in offline_lines(script)]
    return notes


def _version(text: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        return None


_URL = re.compile(r"https?://[^\s\"'|;)]+")
_UV_INSTALLER = re.compile(r"^https?://astral\.sh/uv/[^/]+/install\.sh$")
_FETCHERS = re.compile(
    r"\b(npm\s+(install|i|ci|add)|npx\s|yarn\s+(add|install)|pnpm\s+(add|install|i)\b|cargo\s+(install|add|fetch)"
    r"|go\s+(get|install|mod\s+download)|gem\s+install|git\s+clone|apk\s+add)\b"
)
_PIP_INSTALL = re.compile(r"\bpip3?\s+install\s+(.*)")
_WITH = re.compile(r"--with[ =]([^\s]+)")
_APT_INSTALL = re.compile(r"\bapt(-get)?\s+install\s+(.*)")
_SHIMMED_DEBS = {"curl", "ca-certificates"}  # veri's verifier shims answer these offline


def offline_lines(script: str) -> list[str]:
    """The lines of a test.sh that the offline verifier cannot serve (design §3.3): other URLs than uv's
    installer, npm/cargo/go/gem/git fetches, unpinned pip or uv `--with` requirements, and apt packages
    that only work when the image already has them. Each: `line N: what; the fix`."""
    found = []
    for number, raw in enumerate(script.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        where = f"line {number}"
        for url in _URL.findall(line):
            if not _UV_INSTALLER.match(url):
                found.append(f"{where}: fetches {url}, and the verifier has no network; ship the file in tests/")
        if fetch := _FETCHERS.search(line):
            found.append(f"{where}: `{fetch.group(0).strip()}` fetches from the network, which the verifier does"
                         " not have; install it in environment/Dockerfile")
        unpinned = [req for req in _WITH.findall(line) if "==" not in req]
        if pip := _PIP_INSTALL.search(line):
            unpinned += _pip_requirements(pip.group(1).split())
        for requirement in unpinned:
            found.append(f"{where}: `{requirement}` is not pinned, so it cannot be vendored; write it as"
                         f" `{requirement}==VERSION`")
        if apt := _APT_INSTALL.search(line):
            packages = [word for word in apt.group(2).split() if not word.startswith("-")]
            if missing := [p for p in packages if p not in _SHIMMED_DEBS]:
                found.append(f"{where}: apt installs {' '.join(missing)}: served offline only when the image"
                             " already has them; install them in environment/Dockerfile")
    return found


def _pip_requirements(words: list[str]) -> list[str]:
    """The unpinned names of a `pip install` line's words (the word after -r/-c/-e is a file, not a name)."""
    names, skip = [], False
    for word in words:
        if skip or word in ("&&", "||", ";"):
            skip = False
            if word in ("&&", "||", ";"):
                break
            continue
        if word.startswith("-"):
            skip = word in ("-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-t", "--target")
            continue
        if "==" not in word and not word.startswith((".", "/")):
            names.append(word)
    return names


@dataclass
class TaskSet:
    """Every task under a path, read and checked: the runnable ones, every problem, every note."""

    tasks: list[HarborTask]
    problems: list[Problem]
    notes: list[str]


def check_tasks(path: Path) -> TaskSet:
    """`find_tasks` + `load_task` + `check_task` + `task_notes` over every task, problems all at once."""
    result = TaskSet([], [], [])
    try:
        folders = find_tasks(path)
    except ProblemsError as error:
        result.problems += error.problems
        return result
    for folder in folders:
        try:
            task = load_task(folder)
        except ProblemsError as error:
            result.problems += error.problems
            continue
        result.tasks.append(task)
        result.problems += check_task(task)
        result.notes += task_notes(task)
    return result

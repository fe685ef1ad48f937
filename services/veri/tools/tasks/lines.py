"""What a task's Dockerfile and test.sh ask the network for, read from their lines: the `FROM` images, the
`apt-get install` packages, the `pip install` / `uvx --with` requirements. `veri tasks vendor` downloads
what these name; `veri tasks build` maps the `FROM` lines."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

# shell operators that end one command and start the next
_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", "{", "}", "then", "do", "else"}
# options of apt-get/pip/uv that take a value (the value is not a package)
_APT_VALUE_OPTIONS = {"-o", "-t", "--target-release", "-c", "--config-file"}
_PIP_VALUE_OPTIONS = {"-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
                      "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--python", "-p",
                      "--trusted-host", "--platform", "--python-version", "--implementation", "--abi",
                      "--cache-dir", "--src", "-e", "--editable", "--upgrade-strategy", "--progress-bar"}
_UV_VALUE_OPTIONS = {"--from", "--python", "-p", "--index-url", "--extra-index-url", "--find-links", "-f",
                     "--cache-dir", "--directory", "--project", "--with-requirements", "--with-editable"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([A-Za-z0-9.+!_-]+)$")
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?$")


@dataclass(frozen=True)
class FromLine:
    index: int  # the line's index in the Dockerfile's lines
    image: str
    stage: str | None  # `AS name`


@dataclass
class Wants:
    """What the lines ask for: apt packages, pinned pip requirements (`name==version`), and what cannot be
    vendored as written (unpinned names, requirement files), each with the line it came from."""
    apt: list[str] = field(default_factory=list)
    pins: list[str] = field(default_factory=list)
    unpinned: list[str] = field(default_factory=list)

    def add(self, other: Wants) -> None:
        for mine, theirs in ((self.apt, other.apt), (self.pins, other.pins), (self.unpinned, other.unpinned)):
            mine.extend(x for x in theirs if x not in mine)


def logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined and comments dropped."""
    out: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") and not current:
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        if stripped.startswith("#"):  # a comment inside a continued RUN
            continue
        out.append((current + raw).strip())
        current = ""
    if current.strip():
        out.append(current.strip())
    return [line for line in out if line]


def from_lines(dockerfile: str) -> list[FromLine]:
    """The `FROM` lines (raw line indexes, for rewriting), `--platform=` skipped."""
    found = []
    for index, line in enumerate(dockerfile.splitlines()):
        words = line.split()
        if not words or words[0].upper() != "FROM":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if not args:
            continue
        stage = args[2] if len(args) >= 3 and args[1].upper() == "AS" else None
        found.append(FromLine(index, args[0], stage))
    return found


def base_images(dockerfile: str) -> list[str]:
    """The images the `FROM` lines pull: not `scratch`, not an earlier stage's name, not `$ARG`s."""
    stages: set[str] = set()
    images = []
    for line in from_lines(dockerfile):
        if line.image.lower() not in stages and line.image != "scratch" and line.image not in images:
            images.append(line.image)
        if line.stage:
            stages.add(line.stage.lower())
    return images


def map_from_lines(dockerfile: str, image_map: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The Dockerfile with its `FROM` images replaced by image_map's (only those lines), and what was
    replaced. `name` in the map also matches `name:latest`."""
    lines = dockerfile.splitlines(keepends=True)
    applied: dict[str, str] = {}
    stages: set[str] = set()
    for line in from_lines(dockerfile):
        target = None if line.image.lower() in stages else lookup(image_map, line.image)
        if line.stage:
            stages.add(line.stage.lower())
        if target is None:
            continue
        lines[line.index] = re.sub(rf"(?<=\s){re.escape(line.image)}(?=\s|$)", target, lines[line.index], count=1)
        applied[line.image] = target
    return "".join(lines), applied


def lookup(image_map: dict[str, str], image: str) -> str | None:
    if image in image_map:
        return image_map[image]
    if ":" not in image.rsplit("/", 1)[-1]:
        return image_map.get(f"{image}:latest")
    if image.endswith(":latest"):
        return image_map.get(image[: -len(":latest")])
    return None


def commands(line: str) -> list[list[str]]:
    """A shell line as its simple commands (split at && || ; | ...), `VAR=x` prefixes and sudo dropped."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|(){}")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:  # an unbalanced quote: read it word by word
        words = line.split()
    out: list[list[str]] = [[]]
    for word in words:
        if word in _SEPARATORS or set(word) <= set(";&|(){}"):
            out.append([])
        else:
            out[-1].append(word)
    result = []
    for command in out:
        while command and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", command[0]) or command[0] in ("sudo", "env", "exec")):
            command = command[1:]
        if command:
            result.append(command)
    return result


def _operands(words: list[str], value_options: set[str]) -> list[str]:
    """The non-option words (an option in value_options takes the next word)."""
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in value_options:
            skip = True
        elif not word.startswith("-"):
            out.append(word)
    return out


def _requirements(words: list[str], wants: Wants) -> None:
    for word in words:
        if _PIN.match(word):
            wants.pins.append(word)
        elif _NAME.match(word):
            wants.unpinned.append(word)
        else:  # a URL, a path, a range (`x>=1`): pip needs the network for it
            wants.unpinned.append(word)


def _pip_install(command: list[str]) -> list[str] | None:
    """The words after `install` of a pip call (pip, pip3, python -m pip, uv pip), else None."""
    program = command[0].rsplit("/", 1)[-1]
    rest = command[1:]
    if re.fullmatch(r"python[0-9.]*", program) and rest[:2] == ["-m", "pip"]:
        rest = rest[2:]
    elif program == "uv" and rest[:1] == ["pip"]:
        rest = rest[1:]
    elif not re.fullmatch(r"pip[0-9.]*", program):
        return None
    return rest[1:] if rest[:1] == ["install"] else None


def read_command(command: list[str], wants: Wants) -> None:
    """What one simple command asks for, added to wants."""
    program = command[0].rsplit("/", 1)[-1]
    if program in ("apt-get", "apt") and "install" in command:
        after = command[command.index("install") + 1:]
        wants.apt.extend(p for p in _operands(after, _APT_VALUE_OPTIONS) if p not in wants.apt)
        return
    pip_args = _pip_install(command)
    if pip_args is not None:
        for option in ("-r", "--requirement"):
            if option in pip_args and pip_args.index(option) + 1 < len(pip_args):
                wants.unpinned.append(f"-r {pip_args[pip_args.index(option) + 1]}")
        _requirements(_operands(pip_args, _PIP_VALUE_OPTIONS), wants)
        return
    uv_tool = program == "uvx" or (program == "uv" and (command[1:2] == ["run"] or command[1:3] == ["tool", "run"]))
    if uv_tool:
        args = command[1:] if program == "uvx" else command[2 if command[1] == "run" else 3:]
        withs = [args[i + 1] for i, w in enumerate(args[:-1]) if w == "--with"]
        withs += [w.split("=", 1)[1] for w in args if w.startswith("--with=")]
        for option in ("--from",):
            if option in args and args.index(option) + 1 < len(args):
                withs.append(args[args.index(option) + 1])
        _requirements(withs, wants)
        if program == "uvx" and "--from" not in args:
            operands = _operands([a for a in args if not a.startswith("--with")], _UV_VALUE_OPTIONS | {"--with"})
            if operands:
                tool = operands[0].replace("@", "==", 1)
                named = {normalize_name(p) for p in wants.pins + wants.unpinned}
                if normalize_name(tool) not in named:
                    _requirements([tool], wants)


def normalize_name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[=<>!~\[@ ]", requirement, maxsplit=1)[0]).lower()


def _dedupe(wants: Wants) -> Wants:
    out = Wants()
    out.add(wants)
    return out


def dockerfile_wants(dockerfile: str) -> Wants:
    """What the Dockerfile's RUN lines install (shell form; the exec form's words likewise)."""
    wants = Wants()
    for line in logical_lines(dockerfile):
        keyword, _, rest = line.partition(" ")
        if keyword.upper() != "RUN":
            continue
        rest = re.sub(r"^(--\S+\s+)+", "", rest.strip())  # RUN --mount=... flags
        if rest.startswith("["):
            rest = " ".join(re.findall(r'"((?:[^"\\]|\\.)*)"', rest))
        for command in commands(rest):
            read_command(command, wants)
    return _dedupe(wants)


def script_wants(script: str) -> Wants:
    """What a test.sh installs at verify time (uvx/uv run --with, pip install, apt-get install)."""
    wants = Wants()
    for line in logical_lines(script):
        for command in commands(line):
            read_command(command, wants)
    return _dedupe(wants)

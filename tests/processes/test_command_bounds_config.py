"""The per-command bounds' configuration, without running commands: where cgroups are
found (v1, v2, hybrid), their limit files, the seccomp program, flags and settings."""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

import pytest

from filegate.backends.seccomp import filter_program
from filegate.backends.settings import Settings
from filegate.cli.workers import add_bound_flags, settings_with_flags
from filegate.processes import cgroups
from filegate.processes.reaper import CommandBounds, bound_error

V1_CGROUP = "8:pids:/\n4:memory:/svc/worker\n1:cpu,cpuacct:/\n0::/\n"


def _mount(point: Path | str, fstype: str, options: str, root: str = "/") -> str:
    return f"30 1 0:26 {root} {point} rw,relatime shared:5 - {fstype} cgroup rw,{options}"


def test_v1_controllers_are_found_in_their_hierarchies() -> None:
    mounts = "\n".join([
        _mount("/sys/fs/cgroup/memory", "cgroup", "memory"),
        _mount("/sys/fs/cgroup/pids", "cgroup", "pids"),
        _mount("/sys/fs/cgroup/unified", "cgroup2", "nsdelegate"),
    ])  # fmt: skip
    found = cgroups.locate(V1_CGROUP, mounts)
    assert found == {
        "memory": (1, Path("/sys/fs/cgroup/memory/svc/worker")),
        "pids": (1, Path("/sys/fs/cgroup/pids")),
    }


def test_v1_mount_of_a_subtree_and_of_nothing() -> None:
    """A container sees its own cgroup as the mount's root; a cgroup outside it, or a
    controller not mounted, is named as the reason."""
    inside = _mount("/sys/fs/cgroup/memory", "cgroup", "memory", root="/svc")
    assert cgroups.locate(V1_CGROUP, inside)["memory"] == (1, Path("/sys/fs/cgroup/memory/worker"))
    elsewhere = _mount("/sys/fs/cgroup/memory", "cgroup", "memory", root="/other")
    assert "outside the mounted" in str(cgroups.locate(V1_CGROUP, elsewhere)["memory"])
    assert "not mounted" in str(cgroups.locate(V1_CGROUP, "")["pids"])


def test_v2_needs_the_controller_offered_to_the_workers_cgroup(tmp_path: Path) -> None:
    point = tmp_path / "cg root"  # a space: mountinfo writes it \040
    (point / "app").mkdir(parents=True)
    (point / "app" / "cgroup.controllers").write_text("cpu io memory\n")
    mounts = _mount(str(point).replace(" ", "\\040"), "cgroup2", "nsdelegate")
    found = cgroups.locate("0::/app\n", mounts)
    assert found["memory"] == (2, point / "app")
    assert found["pids"] == f"cgroup v2 offers no pids controller to {point / 'app'}"
    # A worker that moved into its leaf earlier makes its commands next to the leaf.
    (point / "app" / cgroups.WORKER_LEAF).mkdir()
    again = cgroups.locate(f"0::/app/{cgroups.WORKER_LEAF}\n", mounts)
    assert again["memory"] == (2, point / "app")


def test_hybrid_and_none() -> None:
    hybrid = "\n".join([_mount("/sys/fs/cgroup/memory", "cgroup", "memory")])
    found = cgroups.locate("4:memory:/\n0::/\n", hybrid)
    assert found["memory"] == (1, Path("/sys/fs/cgroup/memory"))
    assert found["pids"] == "no cgroup pids controller on this host"
    assert set(cgroups.locate("", "").values()) == {
        "no cgroup memory controller on this host",
        "no cgroup pids controller on this host",
    }


def test_limit_files_per_version() -> None:
    bounds = CommandBounds(command_memory_bytes=1 << 30, max_processes=64)
    limits = {v: cgroups._limits(v, "memory", bounds) for v in (1, 2)}
    assert ("memory.limit_in_bytes", str(1 << 30), True) in limits[1]
    assert ("memory.memsw.limit_in_bytes", str(1 << 30), False) in limits[1]  # no swap way out
    assert ("memory.max", str(1 << 30), True) in limits[2]
    assert ("memory.swap.max", "0", False) in limits[2]
    assert ("memory.oom.group", "1", False) in limits[2]
    assert cgroups._limits(1, "pids", bounds) == [("pids.max", "66", True)]  # + supervisor + 1


def test_seccomp_program_is_valid_classic_bpf() -> None:
    for machine in ("x86_64", "aarch64"):
        program = filter_program(machine)
        assert program is not None and len(program) % 8 == 0 and len(program) // 8 < 64
        ops = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
        assert ops[0] == (0x20, 0, 0, 4)  # first: load the architecture
        for at, (code, jt, jf, _) in enumerate(ops):  # every jump lands inside
            if code & 0x07 == 0x05:
                assert at + 1 + max(jt, jf) < len(ops)
        assert ops[-1][0] == 0x06  # ends with a return
    assert filter_program("riscv64") is None


def test_bound_errors_name_the_bound_and_the_setting() -> None:
    bounds = CommandBounds(command_memory_bytes=3 << 30, write_bytes=100 << 20)
    text, code = bound_error("memory", bounds)
    assert "3 GiB" in text and "FILEGATE_EXEC_COMMAND_MEMORY" in text and code == "too_large"
    text, _ = bound_error("write", bounds)
    assert "100 MiB" in text and "FILEGATE_EXEC_WRITE_SIZE" in text
    text, _ = bound_error("processes", bounds)
    assert "more than 64 processes" in text and "--exec-max-processes" in text
    assert bound_error("join", bounds)[1] == "io_error"
    with pytest.raises(ValueError):
        CommandBounds(write_bytes=-1)


def test_flags_and_settings_reach_the_bounds() -> None:
    defaults = Settings().commands.bounds()
    assert (defaults.command_memory_bytes, defaults.write_bytes) == (2 << 30, 256 << 20)
    env = Settings.from_env(
        {"FILEGATE_EXEC_WRITE_SIZE": "1GiB", "FILEGATE_EXEC_COMMAND_MEMORY": "0"}
    )
    assert env.commands.bounds().write_bytes == 1 << 30
    assert env.commands.bounds().command_memory_bytes == 0  # 0: no limit
    parser = argparse.ArgumentParser()
    add_bound_flags(parser)
    args = parser.parse_args(
        ["--max-command-write-bytes", "64MiB", "--exec-command-memory", "4GiB"]
    )
    bounds = settings_with_flags(args, Settings()).commands.bounds()
    assert (bounds.write_bytes, bounds.command_memory_bytes) == (64 << 20, 4 << 30)
    alias = parser.parse_args(["--exec-write-size", "1MiB"])
    assert settings_with_flags(alias, Settings()).commands.bounds().write_bytes == 1 << 20

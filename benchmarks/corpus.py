"""The pinned corpus of real code the static benchmarks scan: which releases, how pip fetches them, what is scanned.

    python benchmarks/corpus.py                 fetch and unpack every corpus package (prints where)
    python benchmarks/corpus.py deepspeed==0.13.4 ...   any other pinned release, on demand

Archives are downloaded by pip (`pip download --no-deps`) into .cache/corpus/archives/ and unpacked into
.cache/corpus/<name>-<version>/ (git-ignored). Only Python sources (*.py, *.pyi) are unpacked, with tarfile's
"data" filter for sdists and the same checks by hand for wheels (no links, no absolute paths, no "..").
Nothing of the corpus is ever imported or run by the benchmarks. For an sdist, pip itself asks the package's build
backend for metadata while downloading; when that fails in an isolated build environment we retry once with
`--no-build-isolation`.

How each package is fetched (the `source` column):
- sdist: `pip download --no-deps --no-binary :all:` (deepspeed publishes only sdists; megatron-core's sdist holds
  the same megatron/ tree as its wheel).
- wheel: `pip download --no-deps --only-binary :all:`. vllm 0.33.0 comes as its wheel: the sdist's metadata step
  runs vllm's setup.py, which needs setuptools-rust and a CMake toolchain and fails here. The wheel holds the
  vllm/ sources plus two folders the build vendors in (vllm/vllm_flash_attn, parts of vllm/third_party), so it
  has more files than the sdist's vllm/ (3 231 .py against the ~2 990 of the sdist).
- torch 2.13.0: the CPU wheel; a copy on this machine's disk (/opt/wheels) is used when present, else pip
  fetches `torch==2.13.0+cpu` from the PyTorch CPU index.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "corpus"
PYTHON_SUFFIXES = (".py", ".pyi")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PIP_TIMEOUT_S = 900


@dataclass(frozen=True)
class Package:
    """One pinned release. `scan` are folders of the unpacked tree that the benchmarks scan."""

    name: str  # the distribution name pip knows
    version: str
    source: str  # "sdist" or "wheel"
    scan: tuple[str, ...]
    local_archive: str = ""  # a copy on disk used instead of downloading, when it exists
    pip_spec: str = ""  # what to ask pip for when not name==version
    extra_index: str = ""

    @property
    def label(self) -> str:
        return f"{self.name}-{self.version}"


# The corpus of the real-code precision benchmark (issue 13's table), one row per package.
CORPUS: tuple[Package, ...] = (
    Package("deepspeed", "0.19.8", "sdist", ("deepspeed",)),
    Package("vllm", "0.33.0", "wheel", ("vllm",)),
    Package("torchrec", "1.9.2", "wheel", ("torchrec",)),
    Package("torch", "2.13.0", "wheel", ("torch",),
            local_archive="/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
            pip_spec="torch==2.13.0+cpu", extra_index=TORCH_CPU_INDEX),
    Package("megatron-core", "0.16.1", "sdist", ("megatron",)),
    Package("torchtitan", "0.3.0", "wheel", ("torchtitan",)),
)

# Other pinned releases, fetched on demand (before/after tests of real fixes: hpZ, DeepSpeed PR #8080).
EXTRA: tuple[Package, ...] = (
    Package("deepspeed", "0.13.4", "sdist", ("deepspeed",)),
    Package("deepspeed", "0.13.5", "sdist", ("deepspeed",)),
    Package("deepspeed", "0.19.2", "sdist", ("deepspeed",)),
    Package("deepspeed", "0.19.3", "sdist", ("deepspeed",)),
)


def find_package(name: str, version: str | None = None) -> Package:
    """The table row of `name` (and `version`); a release not in the tables is fetched as an sdist."""
    for package in CORPUS + EXTRA:
        if package.name == name and version in (None, package.version):
            return package
    if version is None:
        raise KeyError(f"{name} is not in the corpus; name a version (name==version)")
    return Package(name, version, "sdist", (name.replace("-", "_"),))


def unpacked(package: Package, cache: Path = CACHE) -> Path:
    """The folder holding `package`'s unpacked Python sources, fetched and unpacked on first use."""
    tree = cache / package.label
    if (tree / ".unpacked").exists():
        return tree
    archive = archive_of(package, cache / "archives")
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=f".{package.label}-"))
    try:
        if archive.suffix == ".whl":
            _unzip_sources(archive, staging)
        else:
            _untar_sources(archive, staging)
        shutil.rmtree(tree, ignore_errors=True)
        staging.rename(tree)
        (tree / ".unpacked").touch()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tree


def archive_of(package: Package, archives: Path) -> Path:
    """The downloaded archive (sdist or wheel) of `package`, downloading it with pip when missing."""
    archives.mkdir(parents=True, exist_ok=True)
    if package.local_archive and Path(package.local_archive).exists():
        return Path(package.local_archive)
    found = _archives_in(archives, package)
    if not found:
        _pip_download(package, archives)
        found = _archives_in(archives, package)
    if not found:
        raise RuntimeError(f"pip downloaded no archive of {package.label} into {archives}")
    return found[0]


def _archives_in(archives: Path, package: Package) -> list[Path]:
    stem = package.name.replace("-", "_").lower()
    suffixes = (".whl",) if package.source == "wheel" else (".tar.gz", ".zip")
    hits = []
    for path in sorted(archives.iterdir()):
        name = path.name.lower().replace("-", "_")
        if name.startswith(f"{stem}_{package.version}") and name.endswith(suffixes):
            rest = name[len(f"{stem}_{package.version}"):]
            if rest[:1] in ("", ".", "_", "+"):  # not 0.19.8 for 0.19.80
                hits.append(path)
    return hits


def _pip_download(package: Package, archives: Path) -> None:
    spec = package.pip_spec or f"{package.name}=={package.version}"
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", spec, "-d", str(archives)]
    command += ["--only-binary", ":all:"] if package.source == "wheel" else ["--no-binary", ":all:"]
    if package.extra_index:
        command += ["--extra-index-url", package.extra_index]
    done = subprocess.run(command, timeout=PIP_TIMEOUT_S)
    if done.returncode != 0 and package.source == "sdist":
        # The metadata step failed inside pip's isolated build environment: try the installed backend.
        subprocess.run(command + ["--no-build-isolation"], check=True, timeout=PIP_TIMEOUT_S)
    elif done.returncode != 0:
        raise RuntimeError(f"pip download of {spec} failed (exit {done.returncode})")


def _untar_sources(archive: Path, target: Path) -> None:
    """Python sources of an sdist, its single top-level folder stripped (deepspeed-0.19.8/deepspeed -> deepspeed)."""
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts
            if member.isfile() and len(parts) > 1 and member.name.endswith(PYTHON_SUFFIXES):
                member = member.replace(name="/".join(parts[1:]), deep=False)
                members.append(member)
        tar.extractall(target, members=members, filter="data")


def _unzip_sources(archive: Path, target: Path) -> None:
    with zipfile.ZipFile(archive) as wheel:
        for info in wheel.infolist():
            path = PurePosixPath(info.filename)
            is_link = (info.external_attr >> 16) & 0o170000 == 0o120000
            if info.is_dir() or is_link or not info.filename.endswith(PYTHON_SUFFIXES):
                continue
            if path.is_absolute() or ".." in path.parts or "\\" in info.filename:
                raise RuntimeError(f"{archive.name}: refusing member {info.filename!r}")
            destination = target.joinpath(*path.parts)
            destination.parent.mkdir(parents=True, exist_ok=True)
            with wheel.open(info) as source, open(destination, "wb") as sink:
                shutil.copyfileobj(source, sink)


def main(argv: list[str]) -> int:
    wanted = [find_package(*arg.split("==", 1)) for arg in argv] if argv else list(CORPUS)
    for package in wanted:
        print(f"{package.label:24} {package.source:6} {unpacked(package)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

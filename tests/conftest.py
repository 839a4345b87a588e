"""Test-suite-wide setup: the `pytester` fixture, for the tests of the pytest plugin (tests/instrument)."""

pytest_plugins = ["pytester"]


# --- source distributions from the package index (tests that scan real projects) -----------------------------------
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

SDIST_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "sdists"


def unpacked_sdist(name: str, version: str) -> Path:
    """`name==version`'s source tree, downloaded once with pip and unpacked under .cache/sdists/ (git-ignored).

    Only the archive is fetched and unpacked with tarfile's data filter; nothing of it is imported or run by the
    tests (pip itself asks the sdist's build backend for metadata while downloading)."""
    target = SDIST_CACHE / f"{name}-{version}"
    if (target / ".unpacked").exists():
        return target
    SDIST_CACHE.mkdir(parents=True, exist_ok=True)
    archive = SDIST_CACHE / f"{name}-{version}.tar.gz"
    if not archive.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             f"{name}=={version}", "-d", str(SDIST_CACHE)],
            check=True, timeout=600)
    staging = Path(tempfile.mkdtemp(dir=SDIST_CACHE, prefix=f".{name}-{version}-"))
    try:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, filter="data")
            else:  # Python < 3.10.12 / 3.11.4: refuse links and paths that leave the folder ourselves
                members = [m for m in tar.getmembers() if (m.isfile() or m.isdir())
                           and not Path(m.name).is_absolute() and ".." not in Path(m.name).parts]
                tar.extractall(staging, members=members)
        roots = list(staging.iterdir())
        assert len(roots) == 1, f"{archive} does not hold one top-level folder: {roots}"
        shutil.rmtree(target, ignore_errors=True)
        roots[0].rename(target)
        (target / ".unpacked").touch()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def unpacked_wheel(name: str, version: str) -> Path:
    """`name==version`'s wheel, for projects that publish no sdist (megatron-core), downloaded once with pip and
    unpacked as data under .cache/sdists/ (zip members are checked to stay inside the folder); never imported."""
    target = SDIST_CACHE / f"{name}-{version}"
    if (target / ".unpacked").exists():
        return target
    SDIST_CACHE.mkdir(parents=True, exist_ok=True)
    stem = name.replace("-", "_")
    wheels = sorted(SDIST_CACHE.glob(f"{stem}-{version}-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                        f"{name}=={version}", "-d", str(SDIST_CACHE)], check=True, timeout=600)
        wheels = sorted(SDIST_CACHE.glob(f"{stem}-{version}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as archive:
        for member in archive.namelist():
            resolved = (target / member).resolve()
            assert resolved.is_relative_to(target.resolve()), member
        archive.extractall(target)
    (target / ".unpacked").touch()
    return target


@pytest.fixture(scope="session")
def wheel():
    """`wheel(name, version)` -> Path of the unpacked wheel (cached between runs)."""
    return unpacked_wheel


@pytest.fixture(scope="session")
def sdist():
    """`sdist(name, version)` -> Path of the unpacked source distribution (cached between runs)."""
    return unpacked_sdist

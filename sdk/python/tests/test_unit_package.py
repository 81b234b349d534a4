# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the package as shipped: one version, read by both the code
and the packaging metadata; the PEP 561 marker in the wheel."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile

import pytest

import libdsec
from libdsec import _version

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
PYPROJECT = os.path.join(SDK, "pyproject.toml")


def test_the_package_version_is_the_version_module():
    assert libdsec.__version__ is _version.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", libdsec.__version__)


def test_pyproject_reads_the_version_module_and_ships_the_marker():
    with open(PYPROJECT, "rb") as f:
        meta = tomllib.load(f)
    assert "version" not in meta["project"]  # not written twice
    assert "version" in meta["project"]["dynamic"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "libdsec._version.__version__"}
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["libdsec"]
    assert os.path.isfile(os.path.join(SDK, "libdsec", "py.typed"))


# Debian 12's setuptools (66) still calls [tool.setuptools] beta; it works.
@pytest.mark.filterwarnings("ignore:Support for .*tool.setuptools.* is still .beta")
def test_setuptools_resolves_the_same_version():
    pyprojecttoml = pytest.importorskip("setuptools.config.pyprojecttoml",
                                        reason="setuptools is not installed")
    conf = pyprojecttoml.read_configuration(PYPROJECT, expand=True)
    assert conf["project"]["version"] == libdsec.__version__


def test_the_wheel_carries_the_version_and_the_marker():
    pytest.importorskip("setuptools", reason="setuptools is not installed (python3-setuptools)")
    pytest.importorskip("wheel", reason="wheel is not installed (python3-wheel)")
    tmp = tempfile.mkdtemp(prefix="dsec-sdkpy-wheel-")
    try:
        # A copy: building writes build/ and *.egg-info beside pyproject.toml.
        src = os.path.join(tmp, "src")
        shutil.copytree(SDK, src, ignore=shutil.ignore_patterns(
            "tests", "bench", "__pycache__", "build", "*.egg-info"))
        out = os.path.join(tmp, "dist")
        r = subprocess.run(
            [sys.executable, "-c",
             "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))", out],
            cwd=src, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        name = r.stdout.strip().splitlines()[-1]
        assert name == "libdsec-%s-py3-none-any.whl" % libdsec.__version__
        with zipfile.ZipFile(os.path.join(out, name)) as z:
            names = set(z.namelist())
            assert "libdsec/py.typed" in names
            assert "libdsec/_version.py" in names and "libdsec/aio.py" in names
            metadata = z.read("libdsec-%s.dist-info/METADATA" % libdsec.__version__).decode()
        assert "\nVersion: %s\n" % libdsec.__version__ in metadata
        assert "\nRequires-Python: >=3.9\n" in metadata
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

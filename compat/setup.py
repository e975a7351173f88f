"""The compatibility package ``liger_kernel`` (distribution ``liger-kernel``), from liger_cpp's
repository: ``pip install ./compat`` after liger_cpp. Its version is the Liger-Kernel API it
mirrors (liger_kernel/_reference_signatures.json) plus a local label naming liger_cpp's version
(liger_cpp/_version.py), e.g. 0.8.5+liger.cpp.0.2.0."""

import json
import os
import re

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _version() -> str:
    with open(os.path.join(HERE, "liger_kernel", "_reference_signatures.json")) as f:
        liger = json.load(f)["liger_kernel_version"]
    with open(os.path.join(HERE, "..", "liger_cpp", "_version.py")) as f:
        cpp = re.search(r'__version__\s*=\s*"([^"]+)"', f.read()).group(1)
    return f"{liger}+liger.cpp.{cpp}"


setup(version=_version())

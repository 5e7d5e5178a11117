"""The llmtap wheel: the package llmtap (python/llmtap) with the extension module llmtap._native
that CMake built beside it. CMake copies this file and pyproject.toml into <build>/python, where
the package sits whole, and the `llmtap_wheel` target runs, offline:

    cd <build>/python && LLMTAP_VERSION=0.1.0 \\
        python3 -m pip wheel --no-index --no-build-isolation --no-deps . -w <build>/dist

The module is compiled once, by the project's CMake with the capture core it links; setuptools
compiles nothing."""

import os

from setuptools import setup
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    """A platform wheel (cp311-cp311-linux_x86_64): it carries a compiled module."""

    def has_ext_modules(self):
        return True


setup(
    name="llmtap",
    version=os.environ.get("LLMTAP_VERSION", "0.0.0"),
    description="In-process payload capture for Python inference servers (ASGI middleware)",
    license="Apache-2.0",
    packages=["llmtap"],
    package_data={"llmtap": ["_native*.so"]},
    python_requires=">=3.8",
    distclass=BinaryDistribution,
    zip_safe=False,
)

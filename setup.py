"""Builds torch_neuron's C++ core with CMake (see CMakeLists.txt).

    pip install --no-build-isolation .          # install
    pip wheel --no-build-isolation .            # wheel
    pip install --no-build-isolation -e .       # development (used by `make`)

Environment:
    TORCH_NEURON_BUILD_DIR    CMake build directory (default: build/wheel-<python>)
    TORCH_NEURON_BUILD_TESTS  1 to also build the GoogleTest binaries (default 0)
    TORCH_NEURON_BUILD_TYPE   CMake build type (default RelWithDebInfo)
    MAX_JOBS                  parallel compile jobs (default: number of CPUs)
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        # The directory that holds torch_neuron/_C*.so; libtorch_neuron.so goes to lib/ below it.
        package_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        tag = f"py{sys.version_info.major}{sys.version_info.minor}"
        build_dir = Path(os.environ.get("TORCH_NEURON_BUILD_DIR", ROOT / "build" / f"wheel-{tag}"))
        build_dir.mkdir(parents=True, exist_ok=True)
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DTN_OUTPUT_DIR={package_dir}",
            f"-DTN_BUILD_TESTS={'ON' if os.environ.get('TORCH_NEURON_BUILD_TESTS') == '1' else 'OFF'}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('TORCH_NEURON_BUILD_TYPE', 'RelWithDebInfo')}",
        ]
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs], check=True)


setup(
    ext_modules=[CMakeExtension("torch_neuron._C")],
    cmdclass={"build_ext": CMakeBuild},
    package_data={"torch_neuron": ["lib/*.so"]},
)

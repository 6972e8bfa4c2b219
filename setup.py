"""Builds torch_neuron's C++ core with CMake (see CMakeLists.txt).

    pip install --no-build-isolation .          # install
    pip wheel --no-build-isolation .            # wheel
    pip install --no-build-isolation -e .       # development (used by `make`)

A wheel (any build that is not editable) is self-contained: CMake builds into the
build directory, the package gets fresh copies of _C and lib/libtorch_neuron.so, and
third_party/bundle_libs.py copies the non-system libraries they need (Abseil,
protobuf, zlib) into torch_neuron/lib under names of their own (needs patchelf).

Environment:
    TORCH_NEURON_BUILD_DIR    CMake build directory (default: build/wheel-<python>)
    TORCH_NEURON_BUILD_TESTS  1 to also build the GoogleTest binaries (default 0)
    TORCH_NEURON_BUILD_TYPE   CMake build type (default RelWithDebInfo)
    MAX_JOBS                  parallel compile jobs (default: number of CPUs)
"""

import importlib.util
import os
import shutil
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
        # An editable install builds straight into the package; a wheel builds into
        # build_dir/torch_neuron, then copies and bundles (see make_self_contained()).
        editable = self.editable_mode
        output_dir = package_dir if editable else build_dir / "torch_neuron"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DTN_OUTPUT_DIR={output_dir}",
            f"-DTN_BUILD_TESTS={'ON' if os.environ.get('TORCH_NEURON_BUILD_TESTS') == '1' else 'OFF'}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('TORCH_NEURON_BUILD_TYPE', 'RelWithDebInfo')}",
            # The installed RUNPATHs ($ORIGIN-relative), not the build machine's paths.
            f"-DCMAKE_BUILD_WITH_INSTALL_RPATH={'OFF' if editable else 'ON'}",
        ]
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs], check=True)
        if not editable:
            self.make_self_contained(output_dir, package_dir)

    @staticmethod
    def make_self_contained(output_dir: Path, package_dir: Path) -> None:
        """Fresh copies of the built ELF files into the package, then their non-system
        libraries bundled beside them: the bundler edits the copies, never CMake's outputs
        (which an incremental build would then take as up to date)."""
        if shutil.which("patchelf") is None:
            raise RuntimeError("a wheel bundles Abseil and protobuf with patchelf: "
                               "apt-get install patchelf (scripts/setup.sh installs it)")
        shutil.rmtree(package_dir / "lib", ignore_errors=True)
        (package_dir / "lib").mkdir(parents=True)
        for built in output_dir.glob("_C*.so"):
            shutil.copy2(built, package_dir / built.name)
        for built in (output_dir / "lib").glob("*.so"):
            shutil.copy2(built, package_dir / "lib" / built.name)
        torch_lib_dir = Path(importlib.util.find_spec("torch").origin).parent / "lib"
        sys.path.insert(0, str(ROOT / "third_party"))
        from bundle_libs import bundle

        for old, new in sorted(bundle(package_dir, torch_lib_dir).items()):
            print(f"bundled {old} as torch_neuron/lib/{new}")


setup(
    ext_modules=[CMakeExtension("torch_neuron._C")],
    # The ELF files are no package data: make_self_contained() puts them into the
    # build's package directory (package data would copy the development build's).
    cmdclass={"build_ext": CMakeBuild},
)

"""Makes a built torch_neuron package self-contained, the way `auditwheel repair` does.

Every ELF file of the package (torch_neuron/_C*.so, torch_neuron/lib/*.so*) may need only
glibc, the compiler's runtime (libstdc++, libgcc_s), torch's own libraries (found through the
RUNPATH $ORIGIN/../torch/lib), and libraries inside the package. Any other library they need,
directly or through another such library (Debian's Abseil and protobuf, and the zlib protobuf
needs), is copied into torch_neuron/lib/ under a name of its own, libprotobuf-<hash>.so.32
(the first 8 hex digits of the SHA-256 of its contents), with that name as its soname and
$ORIGIN as its RUNPATH; every ELF that needed the old name then needs the new one. A renamed
copy never stands in for, and is never stood in for by, a system copy another extension loads.

Debian's static Abseil and protobuf archives cannot be linked into a shared library instead:
they are not position-independent (local-exec TLS relocations, R_X86_64_TPOFF32).

setup.py runs this on wheel builds only (the development build links the system libraries).
Needs readelf (binutils), ldd (glibc) and patchelf (Debian `patchelf`).

    python third_party/bundle_libs.py PACKAGE_DIR TORCH_LIB_DIR
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# Libraries every Linux that runs torch provides, as manylinux policies list them: glibc's
# (libc, libm, libpthread, libdl, librt, the dynamic loader) and the compiler's runtime.
SYSTEM_LIBRARY = re.compile(
    r"^(libc|libm|libpthread|libdl|librt|libutil|libresolv|libstdc\+\+|libgcc_s)\.so\.\d+$"
    r"|^ld-linux-x86-64\.so\.2$|^linux-vdso\.so\.1$")


def is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def _dynamic_entries(path: Path, tag: str) -> list[str]:
    out = subprocess.run(["readelf", "-d", "-W", str(path)], check=True, capture_output=True,
                         text=True).stdout
    return re.findall(rf"\({tag}\)\s+[^\[]*\[([^\]]+)\]", out)


def needed(path: Path) -> list[str]:
    """The DT_NEEDED names of an ELF file."""
    return _dynamic_entries(path, "NEEDED")


def soname(path: Path) -> str | None:
    names = _dynamic_entries(path, "SONAME")
    return names[0] if names else None


def resolve(path: Path, torch_lib_dir: Path) -> dict[str, str]:
    """Name -> path of every library the loader finds for `path` (ldd: the whole closure)."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(torch_lib_dir))
    out = subprocess.run(["ldd", str(path)], check=True, capture_output=True, text=True,
                         env=env).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def bundled_name(name: str, contents: bytes) -> str:
    """libprotobuf.so.32 -> libprotobuf-1a2b3c4d.so.32."""
    stem, dot_so, rest = name.partition(".so")
    return f"{stem}-{hashlib.sha256(contents).hexdigest()[:8]}{dot_so}{rest}"


def bundle(package_dir: Path, torch_lib_dir: Path) -> dict[str, str]:
    """Copies what the package's ELF files need from outside into package_dir/lib and points
    them at the copies. Returns original name -> bundled file name."""
    lib_dir = package_dir / "lib"
    lib_dir.mkdir(exist_ok=True)
    torch_names = set(os.listdir(torch_lib_dir))
    ours = [p for p in sorted(package_dir.rglob("*.so*")) if p.is_file() and is_elf(p)]
    own_names = {soname(p) or p.name for p in ours} | {p.name for p in ours}
    where: dict[str, str] = {}
    for path in ours:
        where.update(resolve(path, torch_lib_dir))

    renamed: dict[str, str] = {}
    pending = list(ours)
    while pending:
        for name in needed(pending.pop()):
            if (SYSTEM_LIBRARY.match(name) or name in torch_names or name in own_names
                    or name in renamed):
                continue
            source = where.get(name)
            if source is None or source == "not found":
                raise RuntimeError(f"{name}, needed by the package, is not found")
            contents = Path(source).read_bytes()
            copy = lib_dir / bundled_name(name, contents)
            copy.write_bytes(contents)
            copy.chmod(0o755)
            # One edit per call: patchelf 0.14 (Debian 12) given both in one call wrote the
            # RUNPATH as the soname too.
            subprocess.run(["patchelf", "--set-soname", copy.name, str(copy)], check=True)
            subprocess.run(["patchelf", "--set-rpath", "$ORIGIN", str(copy)], check=True)
            if soname(copy) != copy.name:
                raise RuntimeError(f"patchelf left {copy} with soname {soname(copy)}")
            renamed[name] = copy.name
            pending.append(copy)

    for path in ours + [lib_dir / n for n in renamed.values()]:
        swaps = [arg for old in needed(path) if old in renamed
                 for arg in ("--replace-needed", old, renamed[old])]
        if swaps:
            subprocess.run(["patchelf", *swaps, str(path)], check=True)
    return renamed


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    if shutil.which("patchelf") is None:
        sys.exit("patchelf is needed to bundle libraries: apt-get install patchelf")
    renamed = bundle(Path(sys.argv[1]), Path(sys.argv[2]))
    for old, new in sorted(renamed.items()):
        print(f"bundled {old} as lib/{new}")


if __name__ == "__main__":
    main()

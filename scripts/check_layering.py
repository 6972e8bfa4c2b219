#!/usr/bin/env python3
"""Checks that csrc/'s #include edges point down DESIGN.md's picture (ctest runs it).

    python scripts/check_layering.py              # the tree: exit 1 on a violation
    python scripts/check_layering.py --self-test  # shows it catches an upward include
    python scripts/gen_layout_md.py [--check]     # docs/ARCHITECTURE.md's layout, from LAYOUT below

A file in csrc/<folder>/ may include headers of its own folder and of folders
below it in LAYERS, never above; a folder missing from LAYERS is a violation too
(place it before adding it). Some downward edges are narrowed to named headers
(NAMED_EDGES): compiler/ sees of runtime/ only the kernel ABI. Outside python/,
no file includes Python or pybind11 headers; in TORCH_FREE folders, none includes
torch's (ATen, c10, torch). Only quoted project includes (`#include "ir/node.h"`) are edges; system
and third-party includes (`<...>`) are checked for Python headers alone.

The process-wide config (`GlobalConfig()`) is read only at the top, by the files
of CONFIG_READERS and as often as they say; code below takes the sub-config it
needs, passed down. LAYOUT describes each folder (its stage and key files, which
must exist) for docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import tempfile
from typing import List

# Lowest first. An arrow may point only to the left (or stay in its folder).
LAYERS = (
    "proto",     # generated protobuf formats
    "base",      # config, status and the Status -> exception table, metrics
    "runtime",   # device memory, queues, execution of programs; the kernel ABI
    "ir",        # immutable nodes, shapes, hashing, canonical graphs
    "neff",      # the executable container (reads and writes runtime programs)
    "compiler",  # passes, fusion, codegen, lowering: graph -> program
    "cache",     # ExecutableProvider chain (assembled from the cache sub-config), tiering, compile settings
    "service",   # the compile service and its client provider
    "lazy",      # tensors, tracer, scheduler seams, graph executor
    "aten",      # ATen kernels registered with the dispatcher (one site), composites of neuron ops
    "eager",     # adaptive eager (a Scheduler)
    "registry",  # shape registry (a TraceObserver)
    "dynamo",    # the compiled road: torch.compile regions traced once, run as programs
    "python",    # pybind11 bindings: the only folder that sees Python
)

# (from folder, to folder) -> the only headers of `to` that `from` may include.
# DESIGN.md: the compiler knows nothing of the runtime beyond the kernel ABI
# (it emits NEFF bytes; neff/ builds the runtime's programs); ir/ nothing of it.
NAMED_EDGES = {
    ("compiler", "runtime"): ("runtime/kernel_abi.h",),
    ("ir", "runtime"): (),
}

# Each folder of LAYERS: its stage and its key files (relative to the folder;
# a `*` stands for several), in the table of docs/ARCHITECTURE.md
# (scripts/gen_layout_md.py writes it).
LAYOUT = {
    "proto": ("versioned protobuf formats: the NEFF container, compile requests, the service's messages, the "
              "metrics snapshot", ("neff.proto", "compile_request.proto", "service.proto", "metrics.proto")),
    "base": ("settings (one table, passed down as sub-configs), metrics, the profiler's events, the dtype table "
             "(dtypes by c10's number), status macros, the Status -> exception table; no torch",
             ("config.h", "metrics.h", "profiler.h", "dtypes.h", "error_kind.h")),
    "runtime": ("device arenas and registry, allocator, guard, hooks, generator, device buffers and transfers, "
                "events, the execution queue, the program executor and launch (donation), fused-kernel operators "
                "and the kernels' thread team, the kernel ABI, collective ops (neuron::all_reduce and kin, over "
                "gloo); torch.profiler's bridge and the dtype refusal",
                ("device_registry.h", "device_arena.cc", "execution_queue.cc", "executor.cc", "launch.h",
                 "kernel_abi.h", "torch_profiler.h", "dtype_checks.h")),
    "ir": ("immutable nodes, shapes, XXH3 hashing, hash-consing, canonical graphs, text/DOT printers, the "
           "per-op traits table, operator schemas and their lookup", ("node.h", "graph.h", "hash.h", "op_traits.h", "op_schema.h", "op_lookup.h")),
    "neff": ("the executable format: the writer frames the compiler's payload; the reader is the only builder of "
             "a `runtime::Program`", ("neff_writer.cc", "neff_reader.cc")),
    "compiler": ("CompileRequest in, NEFF bytes out (`Compile(request, options, target)`): the pass pipeline "
                 "(verifier, CSE, constant folding, DCE, foreach expansion, decomposition, elementwise, row- and "
                 "column-reduction fusion), kernel codegen and its C helpers (tier 1), lowering into the NEFF's "
                 "program; `target.h` and the host target (`host/`: toolchain, ISA, kernel build)",
                 ("compiler.h", "compile_request.h", "pass_pipeline.cc", "elementwise_fusion.cc",
                  "kernel_codegen.cc", "lowering.cc", "target.h", "host/host_target.h", "host/native_build.h")),
    "cache": ("the ExecutableProvider chain (single flight per key) assembled from the cache sub-config: memory "
              "LRU, disk cache (sharded, locked, validated), Redis (signed entries), the compiler here; tiered compilation around it with its pool; "
              "compile settings (targets, fingerprints, kernel objects) from the compile sub-config",
              ("executable_provider.h", "chain_assembly.h", "tiered_chain.h", "compile_pool.h",
               "compile_settings.h", "compile_provider.cc", "disk_cache.cc", "remote_provider.cc",
               "entry_signature.h")),
    "service": ("the per-machine compile service (server) and its client, a level of the chain",
                ("server.cc", "client.cc", "framing.h")),
    "lazy": ("lazy tensors under functionalization, the generic tracer (its stages), the CPU fallback, copy "
             "kernels, C++ Meta kernels, the Scheduler seam, the graph executor (sync points, what has run, "
             "queueing), captured steps; computes a graph's key, builds its CompileRequest on a miss and asks "
             "cache/; reports compiles",
             ("tracer.cc", "trace_info.h", "tracer_registration.cc", "meta_inference.cc", "layouts.cc",
              "graph_executor.cc", "ran_values.h", "executable_cache.cc", "compile_report.cc", "step_graph.cc",
              "scheduler.h")),
    "aten": ("every ATen kernel registered with the dispatcher at load, in one place (one block per key; the copy, "
             "dropout, histc, fused-optimizer and tracer kernels live in `lazy/`, the collectives in `runtime/`), "
             "and kernels that compose neuron ops: fused RNN cells, `ctc_loss` with CPU lengths, foreach ops with "
             "packed scalars, direct view-copy calls", ("registration.cc", "composite_kernels.h", "view_copies.h")),
    "eager": ("the adaptive eager Scheduler: content-defined grouping, background group compiles, held groups run "
              "as one graph", ("grouper.h", "adaptive_scheduler.cc")),
    "registry": ("the shape registry's recording TraceObserver and its record format", ("recorder.h",)),
    "dynamo": ("the compiled road: a `torch.compile(backend=\"neuron\")` graph traced once per input shapes into "
               "one program (the graph executor's CompileRequest path), then run by binding buffers; the Python "
               "side is `torch_neuron/_compile_backend.py`", ("compiled_graph.h",)),
    "python": ("pybind11 bindings, the only folder that sees Python; the top, where the config is read",
               ("module.cc", "bind_*.cc")),
}

# The only files that read GlobalConfig(), and how many times (exactly): the
# tops of the pipelines. Every other file takes the sub-config it needs as an
# argument. A folder ("python/") is allowed whole.
CONFIG_READERS = {
    "base/": "the config itself: where it is defined, read from the environment and overridden",
    "python/": "the bindings: each Python call is a top: the package's _init, a replay, a region's run",
    "lazy/tracer.cc": (1, "the trace of one op: read once, its stages and the eager scheduler get sub-configs"),
    "lazy/graph_executor.cc": (1, "the sync entry: each public entry of the executor reads trace and run once"),
    "lazy/executable_cache.cc": (3, "the executable source: the chain and the compile targets, built once from "
                                    "the cache sub-config, and each sync's compile settings"),
    "lazy/compile_report.cc": (1, "a compile's debug settings (the report, dumps), read when the graph "
                                  "compiles, perhaps on a pool thread long after its sync"),
}

# Folders that know nothing of torch (DESIGN.md: base/ is config, status and
# metrics; proto/ is generated).
TORCH_FREE = ("proto", "base")

PROJECT_INCLUDE = re.compile(r'^\s*#\s*include\s+"(([A-Za-z0-9_]+)/[^"]+)"', re.M)
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^>"]+)[>"]', re.M)
TORCH_HEADERS = re.compile(r"^(ATen/|c10/|torch/)")
PYTHON_HEADERS = re.compile(r"^(Python\.h|pybind11/|torch/python\.h|torch/extension\.h|torch/csrc/(utils/)?python)")
SOURCES = (".h", ".cc", ".cpp", ".hpp", ".inc")
CONFIG_READ = re.compile(r"\bGlobalConfig\(\)")
LINE_COMMENT = re.compile(r"//.*$", re.M)


def config_readers(csrc: str) -> List[str]:
    """Reads of GlobalConfig() outside CONFIG_READERS, or more or fewer than it allows."""
    found: List[str] = []
    counts = {}
    for dirpath, _, files in os.walk(csrc):
        for name in sorted(files):
            if not name.endswith(SOURCES):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, csrc).replace(os.sep, "/")
            if any(rel.startswith(folder) for folder in CONFIG_READERS if folder.endswith("/")):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                text = LINE_COMMENT.sub("", f.read())
            lines = [text.count("\n", 0, m.start()) + 1 for m in CONFIG_READ.finditer(text)]
            if rel in CONFIG_READERS:
                counts[rel] = len(lines)
            else:
                found += [f"csrc/{rel}:{line}: reads GlobalConfig() below the top; take the sub-config "
                          "as an argument (or add the file to check_layering.CONFIG_READERS, saying why)"
                          for line in lines]
    for rel, entry in CONFIG_READERS.items():
        if rel.endswith("/") or not os.path.exists(os.path.join(csrc, rel)):
            continue
        allowed = entry[0]
        if counts.get(rel, 0) != allowed:
            found.append(f"csrc/{rel}: reads GlobalConfig() {counts.get(rel, 0)} time(s); "
                         f"check_layering.CONFIG_READERS allows exactly {allowed}")
    return found


def layout_problems(csrc: str) -> List[str]:
    """Folders of LAYERS without a LAYOUT entry (or the reverse), and key files that do not exist."""
    found = [f"check_layering.LAYOUT: no entry for csrc/{folder}/" for folder in LAYERS if folder not in LAYOUT]
    found += [f"check_layering.LAYOUT: csrc/{folder}/ is not in LAYERS" for folder in LAYOUT if folder not in LAYERS]
    for folder, (_, key_files) in LAYOUT.items():
        for key in key_files:
            if not glob.glob(os.path.join(csrc, folder, key)):
                found.append(f"check_layering.LAYOUT: csrc/{folder}/{key} does not exist")
    return found


def violations(csrc: str) -> List[str]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    found: List[str] = []
    for folder in sorted(os.listdir(csrc)):
        top = os.path.join(csrc, folder)
        if not os.path.isdir(top):
            continue
        if folder not in rank:
            found.append(f"csrc/{folder}/: a folder that is not in check_layering.LAYERS (place it in the picture)")
            continue
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.dirname(csrc))
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in PROJECT_INCLUDE.finditer(text):
                    header, target = m.group(1), m.group(2)
                    line = text.count("\n", 0, m.start()) + 1
                    if target not in rank:
                        if os.path.isdir(os.path.join(csrc, target)):
                            found.append(f"{rel}:{line}: includes {target}/, a folder not in the picture")
                        continue  # a third-party quoted include (absl/..., gtest/...)
                    if rank[target] > rank[folder]:
                        found.append(f"{rel}:{line}: {folder}/ includes {m.group(0).split('include', 1)[1].strip()}"
                                     f" from {target}/, which is above it")
                    elif (folder, target) in NAMED_EDGES and header not in NAMED_EDGES[folder, target]:
                        allowed = NAMED_EDGES[folder, target]
                        found.append(f"{rel}:{line}: {folder}/ includes \"{header}\"; of {target}/ it may include "
                                     + (", ".join(allowed) if allowed else "nothing"))
                for m in ANY_INCLUDE.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    if folder != "python" and PYTHON_HEADERS.match(m.group(1)):
                        found.append(f"{rel}:{line}: includes the Python header {m.group(1)} outside python/")
                    elif folder in TORCH_FREE and TORCH_HEADERS.match(m.group(1)):
                        found.append(f"{rel}:{line}: {folder}/ includes the torch header {m.group(1)}")
    return found


def self_test() -> int:
    """A fixture tree with one upward include, one Python include, one unknown
    folder, two includes outside a named edge, a torch header in base/, a config
    read below the top and one read too many at the top: each must be reported;
    the same tree without them must pass."""
    with tempfile.TemporaryDirectory() as tmp:
        csrc = os.path.join(tmp, "csrc")
        files = {
            "ir/node.h": '#include "base/config.h"\n#include "absl/status/status.h"\n',
            "lazy/tracer.cc": ('#include "ir/node.h"\n#include "cache/executable_provider.h"\n'
                               "const Config& c = GlobalConfig();  // not GlobalConfig() again\n"),
            "cache/executable_provider.h": '#include "compiler/compiler.h"\n',
            "compiler/compiler.h": '#include "ir/node.h"\n#include "runtime/kernel_abi.h"\n',
            "runtime/kernel_abi.h": "#include <cstdint>\n",
            "runtime/program.h": '#include "runtime/kernel_abi.h"\n',
            "base/config.h": "#include <string>\n",
            "python/module.cc": "#include <pybind11/pybind11.h>\n",
        }
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(csrc, rel)), exist_ok=True)
            with open(os.path.join(csrc, rel), "w") as f:
                f.write(text)
        clean = violations(csrc) + config_readers(csrc)
        if clean:
            print("self-test: the clean fixture was reported:", *clean, sep="\n  ")
            return 1
        with open(os.path.join(csrc, "ir/node.h"), "a") as f:
            f.write('#include "lazy/tracer.h"\n')  # ir/ includes lazy/: upward
        with open(os.path.join(csrc, "runtime/hooks.cc"), "w") as f:
            f.write("#include <Python.h>\n")
        with open(os.path.join(csrc, "compiler/lowering.cc"), "w") as f:
            f.write('#include "runtime/program.h"\n')  # compiler/ sees only the kernel ABI
        with open(os.path.join(csrc, "ir/shape.cc"), "w") as f:
            f.write('#include "runtime/kernel_abi.h"\n')  # ir/ sees nothing of runtime/
        with open(os.path.join(csrc, "base/dtypes.cc"), "w") as f:
            f.write("#include <c10/core/ScalarType.h>\n")  # base/ sees no torch
        with open(os.path.join(csrc, "lazy/scheduler.cc"), "w") as f:
            f.write("bool Groups() {\n  return GlobalConfig().run.eager_groups;\n}\n")  # below the top
        with open(os.path.join(csrc, "lazy/tracer.cc"), "a") as f:
            f.write("int Threads() { return GlobalConfig().run.kernel_threads; }\n")  # a second read
        os.makedirs(os.path.join(csrc, "misc"))
        found = violations(csrc) + config_readers(csrc)
        expected = ["csrc/ir/node.h:3: ir/ includes \"lazy/tracer.h\" from lazy/, which is above it",
                    "csrc/runtime/hooks.cc:1: includes the Python header Python.h outside python/",
                    "csrc/compiler/lowering.cc:1: compiler/ includes \"runtime/program.h\"; of runtime/ it may "
                    "include runtime/kernel_abi.h",
                    "csrc/ir/shape.cc:1: ir/ includes \"runtime/kernel_abi.h\"; of runtime/ it may include nothing",
                    "csrc/base/dtypes.cc:1: base/ includes the torch header c10/core/ScalarType.h",
                    "csrc/misc/: a folder that is not in check_layering.LAYERS (place it in the picture)",
                    "csrc/lazy/scheduler.cc:2: reads GlobalConfig() below the top; take the sub-config as an "
                    "argument (or add the file to check_layering.CONFIG_READERS, saying why)",
                    "csrc/lazy/tracer.cc: reads GlobalConfig() 2 time(s); check_layering.CONFIG_READERS allows "
                    "exactly 1"]
        if sorted(found) != sorted(expected):
            print("self-test: expected", *expected, "got", *found, sep="\n  ")
            return 1
    print("self-test: an upward include, a Python header below python/, an unplaced folder, includes "
          "outside a named edge, a torch header in base/ and config reads below the top or beyond the "
          "allowed count are reported")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csrc", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "csrc"))
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args(argv)
    if args.self_test:
        return self_test()
    found = violations(args.csrc) + config_readers(args.csrc) + layout_problems(args.csrc)
    for v in found:
        print(v)
    print(f"layering: {len(found)} violation(s) in {args.csrc}" if found else
          f"layering: every #include in {args.csrc} points down ({' < '.join(LAYERS)}); GlobalConfig() "
          f"is read only by {', '.join(CONFIG_READERS)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

# Finds every native dependency of torch_neuron. Each block names the Debian
# package that provides it (see third_party/versions.md) so a missing one fails
# the configure step with the command that fixes it.

function(tn_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "${what} not found: install it with `apt-get install ${package}` "
                        "(or run scripts/setup.sh, which installs every dependency).")
  endif()
endfunction()

# --- Python and libtorch (the torch wheel installed in the build's Python) ---------
find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
# Device-backend autoload off: with this checkout on the import path but its
# extension not built yet (a first build, or after `make clean`), importing torch
# would load the unbuilt torch_neuron through its entry point and fail.
execute_process(
  COMMAND "${CMAKE_COMMAND}" -E env TORCH_DEVICE_BACKEND_AUTOLOAD=0 "${Python3_EXECUTABLE}" -c
          "import torch, os; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(os.path.dirname(torch.__file__))"
  OUTPUT_VARIABLE _tn_torch_info OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _tn_torch_rc)
if(NOT _tn_torch_rc EQUAL 0)
  message(FATAL_ERROR "torch is not importable from ${Python3_EXECUTABLE}: "
                      "`pip install torch==${TN_TORCH_VERSION}` first.")
endif()
string(REPLACE "\n" ";" _tn_torch_info "${_tn_torch_info}")
list(GET _tn_torch_info 0 TN_TORCH_CMAKE_PREFIX)
list(GET _tn_torch_info 1 TN_TORCH_FOUND_VERSION)
list(GET _tn_torch_info 2 TN_TORCH_DIR)
if(NOT TN_TORCH_FOUND_VERSION MATCHES "^${TN_TORCH_VERSION}([+].*)?$")
  message(FATAL_ERROR "torch_neuron is pinned to torch==${TN_TORCH_VERSION}, "
                      "found torch ${TN_TORCH_FOUND_VERSION} in ${TN_TORCH_DIR}.")
endif()
list(APPEND CMAKE_PREFIX_PATH "${TN_TORCH_CMAKE_PREFIX}")
# TorchConfig warns about kineto and CUDA on the CPU wheel; neither is used.
find_package(Torch REQUIRED QUIET)
set(TN_TORCH_LIB_DIR "${TN_TORCH_DIR}/lib")
find_library(TN_TORCH_PYTHON_LIBRARY torch_python PATHS "${TN_TORCH_LIB_DIR}" NO_DEFAULT_PATH REQUIRED)
# torch's bundled pybind11 lives in its include directory.
set(TN_TORCH_INCLUDE_DIR "${TN_TORCH_DIR}/include")

# --- Abseil: libabsl-dev -------------------------------------------------------------
find_package(absl CONFIG QUIET)
tn_require(absl_FOUND "Abseil" "libabsl-dev")

# --- Protocol Buffers: libprotobuf-dev protobuf-compiler --------------------------
find_package(Protobuf QUIET)
tn_require(Protobuf_FOUND "Protocol Buffers" "libprotobuf-dev protobuf-compiler")
tn_require(Protobuf_PROTOC_EXECUTABLE "protoc" "protobuf-compiler")
# The torch wheel ships headers of an older protobuf in its include directory,
# which would shadow Debian's (gcc ignores -isystem /usr/include). Expose Debian's
# google/ through a directory of its own, searched before torch's.
set(TN_PROTOBUF_INCLUDE_SHIM "${CMAKE_BINARY_DIR}/protobuf_include")
file(MAKE_DIRECTORY "${TN_PROTOBUF_INCLUDE_SHIM}")
file(CREATE_LINK "${Protobuf_INCLUDE_DIR}/google" "${TN_PROTOBUF_INCLUDE_SHIM}/google" SYMBOLIC)
include_directories(BEFORE SYSTEM "${TN_PROTOBUF_INCLUDE_SHIM}")

# --- hiredis: libhiredis-dev, its static archive (a small C library, position-
# independent as Debian builds it): linked into libtorch_neuron.so with its symbols
# hidden, so the remote cache needs no libhiredis where the wheel is installed ------
find_path(TN_HIREDIS_INCLUDE_DIR hiredis/hiredis.h)
find_library(TN_HIREDIS_STATIC_LIBRARY NAMES libhiredis.a)
tn_require(TN_HIREDIS_INCLUDE_DIR "hiredis" "libhiredis-dev")
tn_require(TN_HIREDIS_STATIC_LIBRARY "hiredis (libhiredis.a)" "libhiredis-dev")
include_directories(SYSTEM "${TN_HIREDIS_INCLUDE_DIR}")

# --- OpenSSL: libssl-dev, its static archives (position-independent as Debian
# builds them): HMAC-SHA256 of signed remote entries and rediss:// TLS, linked in
# with symbols hidden like hiredis, so that the wheel needs no libssl and never
# binds to (or is bound by) the copy Python's ssl module loads -------------------
find_path(TN_OPENSSL_INCLUDE_DIR openssl/ssl.h)
find_library(TN_SSL_STATIC_LIBRARY NAMES libssl.a)
find_library(TN_CRYPTO_STATIC_LIBRARY NAMES libcrypto.a)
tn_require(TN_OPENSSL_INCLUDE_DIR "OpenSSL" "libssl-dev")
tn_require(TN_SSL_STATIC_LIBRARY "OpenSSL (libssl.a)" "libssl-dev")
tn_require(TN_CRYPTO_STATIC_LIBRARY "OpenSSL (libcrypto.a)" "libssl-dev")
include_directories(SYSTEM "${TN_OPENSSL_INCLUDE_DIR}")

# --- xxHash: libxxhash-dev (header only: XXH_INLINE_ALL) -----------------------------
find_path(TN_XXHASH_INCLUDE_DIR xxhash.h)
tn_require(TN_XXHASH_INCLUDE_DIR "xxHash" "libxxhash-dev")
add_library(tn_xxhash INTERFACE)
target_include_directories(tn_xxhash SYSTEM INTERFACE "${TN_XXHASH_INCLUDE_DIR}")
target_compile_definitions(tn_xxhash INTERFACE XXH_INLINE_ALL)

# --- GoogleTest: libgtest-dev libgmock-dev (tests only) ------------------------------
if(TN_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  tn_require(GTest_FOUND "GoogleTest" "libgtest-dev libgmock-dev")
endif()

# One interface target carrying libtorch the way every torch_neuron object needs it.
add_library(tn_torch INTERFACE)
target_link_libraries(tn_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(tn_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})

// Files and directories this process may trust because its own user made them.
//
// The disk cache and the kernel-object cache hold native code that the runtime
// loads, and the compile service's socket answers with such code: a file
// another user could have written is code that user would run in this process.
// So an entry is read only when it is a regular file owned by this process's
// effective uid and writable by nobody else, checked on the open descriptor (no
// window between the check and the read), and a socket is used only in a
// directory of this user's that nobody else can write to.
//
// Thread-safe (no state).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torch_neuron {

// The contents of `path`: NOT_FOUND when it does not exist, PERMISSION_DENIED
// when it is not a regular file (a symbolic link included), belongs to another
// uid, or is writable by its group or others; UNAVAILABLE on other errors.
absl::StatusOr<std::string> ReadOwnedFile(const std::string& path);

// OK when `path` is a directory (not a link) of this uid that its group and
// others cannot write to; PERMISSION_DENIED otherwise, NOT_FOUND when absent.
absl::Status CheckOwnedDirectory(const std::string& path);

}  // namespace torch_neuron

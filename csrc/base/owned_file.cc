#include "base/owned_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace torch_neuron {
namespace {

absl::Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

// Why `st` (of `path`) is not this user's alone, or OK.
absl::Status CheckOwner(const struct stat& st, const std::string& path) {
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " belongs to uid ", st.st_uid, ", not to this process's uid ", ::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " is writable by its group or others (mode ", absl::Hex(st.st_mode & 07777), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadOwnedFile(const std::string& path) {
  // O_NOFOLLOW: a link planted in place of an entry fails here (ELOOP).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return absl::PermissionDeniedError(absl::StrCat(path, " is a symbolic link"));
    return ErrnoStatus("cannot open", path, err);
  }
  struct stat st {};
  absl::Status status;
  if (::fstat(fd, &st) != 0) {
    status = ErrnoStatus("cannot stat", path, errno);
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::PermissionDeniedError(absl::StrCat(path, " is not a regular file"));
  } else {
    status = CheckOwner(st, path);
  }
  std::string bytes;
  if (status.ok()) {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = ErrnoStatus("cannot read", path, errno);
        break;
      }
      if (n == 0) break;  // shrank since the stat: what was there
      done += static_cast<size_t>(n);
    }
    bytes.resize(done);
  }
  ::close(fd);
  if (!status.ok()) return status;
  return bytes;
}

absl::Status CheckOwnedDirectory(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return ErrnoStatus("cannot stat", path, errno);
  if (!S_ISDIR(st.st_mode)) return absl::PermissionDeniedError(absl::StrCat(path, " is not a directory"));
  return CheckOwner(st, path);
}

}  // namespace torch_neuron

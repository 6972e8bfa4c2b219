#include "base/owned_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace torch_neuron {
namespace {

class OwnedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/owned_file_test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    file_ = dir_ + "/entry";
    std::ofstream(file_) << "bytes";
    ::chmod(file_.c_str(), 0644);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_, file_;
};

TEST_F(OwnedFileTest, ReadsThisUsersFile) {
  absl::StatusOr<std::string> read = ReadOwnedFile(file_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "bytes");
  EXPECT_TRUE(CheckOwnedDirectory(dir_).ok());
}

TEST_F(OwnedFileTest, MissingIsNotFound) {
  EXPECT_EQ(ReadOwnedFile(dir_ + "/none").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CheckOwnedDirectory(dir_ + "/none").code(), absl::StatusCode::kNotFound);
}

TEST_F(OwnedFileTest, RefusesGroupOrWorldWritable) {
  ::chmod(file_.c_str(), 0664);
  EXPECT_EQ(ReadOwnedFile(file_).status().code(), absl::StatusCode::kPermissionDenied);
  ::chmod(file_.c_str(), 0646);
  EXPECT_EQ(ReadOwnedFile(file_).status().code(), absl::StatusCode::kPermissionDenied);
  ::chmod(dir_.c_str(), 0777);
  EXPECT_EQ(CheckOwnedDirectory(dir_).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(OwnedFileTest, RefusesLinksAndDirectories) {
  const std::string link = dir_ + "/link";
  ASSERT_EQ(::symlink(file_.c_str(), link.c_str()), 0);
  EXPECT_EQ(ReadOwnedFile(link).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReadOwnedFile(dir_).status().code(), absl::StatusCode::kPermissionDenied);
  const std::string dir_link = dir_ + "/dir_link";
  ASSERT_EQ(::symlink(dir_.c_str(), dir_link.c_str()), 0);
  EXPECT_EQ(CheckOwnedDirectory(dir_link).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(OwnedFileTest, RefusesAnotherUsersFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file away needs root";
  ASSERT_EQ(::chown(file_.c_str(), 65534, 65534), 0);  // nobody
  absl::StatusOr<std::string> read = ReadOwnedFile(file_);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(read.status().message().find("belongs to uid 65534"), std::string::npos) << read.status();
}

}  // namespace
}  // namespace torch_neuron

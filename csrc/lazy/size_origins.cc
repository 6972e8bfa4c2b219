#include "lazy/size_origins.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace torch_neuron::lazy {
namespace {

thread_local SizeOrigins* current = nullptr;

// "aten::view_copy.default" -> "aten::view".
absl::string_view BaseName(absl::string_view name) {
  name = name.substr(0, name.find('.'));
  if (absl::EndsWith(name, "_copy")) name.remove_suffix(5);
  return name;
}

}  // namespace

bool SizeOrigins::AnySize(const std::vector<std::vector<int64_t>>& args) {
  for (const std::vector<int64_t>& arg : args) {
    for (const int64_t origin : arg) {
      if (origin != SizeOrigins::kLiteral) return true;
    }
  }
  return false;
}

void SizeOrigins::Arm(std::string op, std::vector<std::vector<int64_t>> args) {
  // The op armed before was never bound as itself (a shortcut, or a kernel
  // of other ops): where it was given a size, that size went where no
  // origin was noted.
  if (armed_ && AnySize(args_)) baked_ = true;
  op_ = std::move(op);
  args_ = std::move(args);
  armed_ = true;
}

bool SizeOrigins::Take(const std::string& name) {
  if (!armed_ || BaseName(name) != BaseName(op_)) {
    taken_.clear();
    return false;
  }
  armed_ = false;
  taken_ = std::move(args_);
  return true;
}

int64_t SizeOrigins::OriginOf(size_t arg, size_t element) const {
  if (arg >= taken_.size() || element >= taken_[arg].size()) return kUnknown;
  return taken_[arg][element];
}

void SizeOrigins::Note(const ir::NodePtr& leaf, int64_t origin) {
  if (!leaf->is_parameter()) {
    if (origin != kLiteral) baked_ = true;
    return;
  }
  if (origin >= 0 && !leaves_.contains(leaf.get())) ++sizes_noted_;
  leaves_[leaf.get()] = origin;
  held_.push_back(leaf);
}

int64_t SizeOrigins::Get(const ir::Node* leaf) const {
  auto it = leaves_.find(leaf);
  return it == leaves_.end() ? kUnknown : it->second;
}

SizeOrigins* SetSizeOrigins(SizeOrigins* origins) { return std::exchange(current, origins); }

SizeOrigins* CurrentSizeOrigins() { return current; }

}  // namespace torch_neuron::lazy

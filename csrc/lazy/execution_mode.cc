#include "lazy/execution_mode.h"

#include <atomic>

namespace torch_neuron::lazy {
namespace {

std::atomic<int>& ModeFlag() {
  static std::atomic<int> mode{static_cast<int>(ExecutionMode::kLazy)};
  return mode;
}

std::function<std::string()>& Getter() {
  static auto* getter = new std::function<std::string()>();
  return *getter;
}

}  // namespace

ExecutionMode CurrentMode() { return static_cast<ExecutionMode>(ModeFlag().load()); }

void SetMode(ExecutionMode mode) { ModeFlag().store(static_cast<int>(mode)); }

std::string CurrentSourceLocation() { return Getter() ? Getter()() : std::string(); }

void SetSourceLocationGetter(std::function<std::string()> getter) { Getter() = std::move(getter); }

}  // namespace torch_neuron::lazy

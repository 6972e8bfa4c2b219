// The execution mode: lazy (trace, run at sync points) or eager (every op runs
// at once through the same compile-and-cache path). Starts lazy; the Python
// package's _init sets the config's (TORCH_NEURON_MODE), torch_neuron.mode
// changes it. Thread-safe (atomic).
#pragma once

#include <functional>
#include <string>

#include "base/config.h"

namespace torch_neuron::lazy {

ExecutionMode CurrentMode();
void SetMode(ExecutionMode mode);

// The user's source line ("train.py:42") of the op being traced, from a getter
// the Python layer installs; "" when none is installed. Only called when the
// config asks for source lines (IR debug, recompile reports): it walks frames.
std::string CurrentSourceLocation();
void SetSourceLocationGetter(std::function<std::string()> getter);

}  // namespace torch_neuron::lazy

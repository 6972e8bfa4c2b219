// Launch: one execution of a loaded Program over device buffers, from ready
// inputs to fulfilled outputs. It is the one place that decides donation:
//
//   - which input buffers the run may overwrite (DonatedParameters): those the
//     program's signature lists as a donation candidate of some output (the
//     NEFF's Signature.donations: device-data inputs of that output's byte size)
//     and that nobody but this launch still holds (a parameter whose tensor
//     took a new value in the step that read the old one);
//   - where each output lives: in a donated buffer a fused kernel wrote it into
//     (taken as it is), in device memory the run allocated (adopted), copied into
//     a donated buffer among its candidates, or copied into a new allocation.
//
// The lazy graph runner (lazy/graph_executor.cc) calls Launch on the device's
// queue and turns its Status into the graph's error.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/device_data.h"
#include "runtime/program.h"

namespace torch_neuron::runtime {

// donated[i]: parameter i's buffer is this run's to overwrite. `sole_holder[i]`
// says the caller holds the only reference to parameter i's buffer; the
// program's donation candidates say whether any output could take it.
std::vector<bool> DonatedParameters(const Program& program, const std::vector<bool>& sole_holder);

// The parameter whose buffer output `output` takes after the run: the first
// of its candidates still `available` (donated and not yet taken; marked
// taken here); -1 for none.
int TakeDonor(const Program& program, size_t output, std::vector<bool>& available);

// Fails every output not yet written with `status` (a no-op for the others)
// and returns it.
absl::Status FailOutputs(const std::vector<DeviceDataPtr>& outputs, const absl::Status& status);

// Waits for `inputs` ((parameter slot, buffer) pairs; `params` holds the other
// parameters), runs `program` and fulfils `outputs` in order. The caller gives
// up its references to the inputs (moved in): a buffer only this launch holds
// may be donated. On an error every output not yet written fails with it: an
// input's own error as it is (it names the graph that produced it), the run's
// with `run_context` after its message. Returns that error, or the first
// output's failure to take its value. `source` is the user's line errors name
// (nullptr: the program's own lines).
absl::Status Launch(const Program& program, std::vector<c10::IValue> params,
                    std::vector<std::pair<size_t, DeviceDataPtr>> inputs,
                    const std::vector<DeviceDataPtr>& outputs, const std::string* source,
                    absl::string_view run_context);

}  // namespace torch_neuron::runtime

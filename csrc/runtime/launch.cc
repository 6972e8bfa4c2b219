#include "runtime/launch.h"

#include <ATen/core/Tensor.h>

#include <chrono>

#include "base/error_kind.h"
#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "runtime/executor.h"

namespace torch_neuron::runtime {
namespace {

struct LaunchMetrics {
  metrics::Counter* executions = metrics::GetCounter("graph.execute.count");
  metrics::Counter* executed_nodes = metrics::GetCounter("graph.execute.nodes");
  metrics::Counter* execute_ns = metrics::GetCounter("graph.execute.ns");
  metrics::Counter* donated_bytes = metrics::GetCounter("graph.donated.bytes");
  // Of those, bytes a fused kernel wrote straight into the donated buffer.
  metrics::Counter* donated_in_place_bytes = metrics::GetCounter("graph.donated.in_place_bytes");
};

const LaunchMetrics& Counters() {
  static const LaunchMetrics* counters = new LaunchMetrics();
  return *counters;
}

}  // namespace

absl::Status FailOutputs(const std::vector<DeviceDataPtr>& outputs, const absl::Status& status) {
  for (const DeviceDataPtr& out : outputs) out->Fail(status);  // a no-op for outputs already written
  return status;
}

std::vector<bool> DonatedParameters(const Program& program, const std::vector<bool>& sole_holder) {
  std::vector<bool> donated(program.parameter_registers.size(), false);
  for (const std::vector<int32_t>& candidates : program.donation_candidates) {
    for (int32_t p : candidates) {
      const auto slot = static_cast<size_t>(p);
      if (slot < donated.size() && slot < sole_holder.size() && sole_holder[slot]) donated[slot] = true;
    }
  }
  return donated;
}

int TakeDonor(const Program& program, size_t output, std::vector<bool>& available) {
  if (output >= program.donation_candidates.size()) return -1;
  for (int32_t p : program.donation_candidates[output]) {
    const auto slot = static_cast<size_t>(p);
    if (slot < available.size() && available[slot]) {
      available[slot] = false;
      return p;
    }
  }
  return -1;
}

absl::Status Launch(const Program& program, std::vector<c10::IValue> params,
                    std::vector<std::pair<size_t, DeviceDataPtr>> inputs,
                    const std::vector<DeviceDataPtr>& outputs, const std::string* source,
                    absl::string_view run_context) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<DeviceDataPtr> input_of(params.size());
  std::vector<bool> sole_holder(params.size(), false);
  for (auto& [slot, data] : inputs) {
    if (absl::Status status = data->Wait(); !status.ok()) return FailOutputs(outputs, status);
    params[slot] = data->DeviceView();
    sole_holder[slot] = data.use_count() == 1 && data->nbytes() > 0;
    input_of[slot] = std::move(data);
  }
  inputs.clear();
  const std::vector<bool> donated = DonatedParameters(program, sole_holder);
  std::vector<int> in_place;
  absl::StatusOr<std::vector<at::Tensor>> results = Execute(program, params, donated, &in_place, source);
  if (!results.ok()) return FailOutputs(outputs, WithTrailingContext(results.status(), run_context));
  if (program.size_generic) {
    // The sizes of this run are the caller's (its trace), not the program's.
    for (size_t i = 0; i < outputs.size() && i < results->size(); ++i) {
      if ((*results)[i].sizes() != c10::IntArrayRef(outputs[i]->sizes())) {
        return FailOutputs(outputs, absl::InternalError(absl::StrCat(
                                        "neuron execution of a size-generic program produced output ", i,
                                        " with sizes ", c10::str((*results)[i].sizes()), ", expected ",
                                        c10::str(c10::IntArrayRef(outputs[i]->sizes())))));
      }
    }
  }
  // Counted before the outputs become readable, so a reader sees the count.
  Counters().executions->Add(1);
  Counters().executed_nodes->Add(program.num_nodes);
  params.clear();  // drop the views of the input buffers

  std::vector<bool> available = donated;
  std::vector<bool> done(outputs.size(), false);
  for (size_t slot = 0; slot < in_place.size(); ++slot) {
    const int output = in_place[slot];
    if (output < 0 || !donated[slot]) continue;
    // A kernel wrote this output into the buffer: the output takes it as it is.
    available[slot] = false;
    const auto bytes = static_cast<int64_t>(input_of[slot]->nbytes());
    Counters().donated_bytes->Add(bytes);
    Counters().donated_in_place_bytes->Add(bytes);
    outputs[output]->FulfillInto(input_of[slot]->TakeBuffer(), (*results)[output]);
    done[output] = true;
  }
  absl::Status first_error;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (done[i]) continue;
    // An output born in device memory is adopted as it is: no donor, no copy.
    if (!outputs[i]->FulfillByAdopting((*results)[i])) {
      const int donor = TakeDonor(program, i, available);
      if (donor >= 0 && input_of[donor]->nbytes() == outputs[i]->nbytes()) {
        Counters().donated_bytes->Add(static_cast<int64_t>(outputs[i]->nbytes()));
        outputs[i]->FulfillInto(input_of[donor]->TakeBuffer(), (*results)[i]);
      } else {
        outputs[i]->Fulfill((*results)[i]);
      }
    }
    absl::Status s = outputs[i]->Wait();
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  Counters().execute_ns->Add(metrics::NanosSince(start));
  return first_error;
}

}  // namespace torch_neuron::runtime

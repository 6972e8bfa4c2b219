// Bindings of the compile service (python -m torch_neuron.service).
#include <pybind11/stl.h>

#include "base/config.h"
#include "cache/disk_cache.h"
#include "python/bindings.h"
#include "service/client.h"
#include "service/server.h"

namespace py = pybind11;

namespace torch_neuron::python {
namespace {

// The client options of this process's settings, with `mode` in place of
// TORCH_NEURON_COMPILE_SERVICE when given.
service::ClientOptions OptionsFor(const std::string& mode) {
  const Config& config = GlobalConfig();
  service::ClientOptions options = service::ClientOptionsFor(config.cache, config.compile.cxx);
  if (!mode.empty()) options.mode = mode;
  if (options.mode == "off") options.mode = "auto";  // the tools talk to this user's service
  // The tools ask the service about itself, never about a graph.
  options.remote_cache.clear();
  options.remote_cache_key.clear();
  return options;
}

py::dict StatusDict(const proto::ServiceStatus& s) {
  py::dict d;
  d["pid"] = s.pid();
  d["uptime_s"] = s.uptime_s();
  d["requests"] = s.requests();
  d["compiles"] = s.compiles();
  d["joins"] = s.joins();
  d["disk_hits"] = s.disk_hits();
  d["errors"] = s.errors();
  d["refused_peers"] = s.refused_peers();
  d["queue_length"] = s.queue_length();
  d["workers"] = s.workers();
  d["in_flight"] = s.in_flight();
  d["kernel_builds"] = s.kernel_builds();
  d["kernel_reuses"] = s.kernel_reuses();
  d["lookups"] = s.lookups();
  d["remote_hits"] = s.remote_hits();
  d["remote_stores"] = s.remote_stores();
  d["remote_corrupt"] = s.remote_corrupt();
  d["remote_untrusted"] = s.remote_untrusted();
  return d;
}

}  // namespace

void BindService(py::module_& m) {
  m.def("_service_set_launcher",
        [](std::vector<std::string> argv) { service::SetLauncher(std::move(argv)); });
  m.def(
      "_service_paths",
      [](const std::string& mode) {
        const service::ClientOptions options = OptionsFor(mode);
        return py::make_tuple(service::ServiceDirFor(options), service::SocketFor(options));
      },
      py::arg("mode") = "");
  // Serves until idle or shut down (the `serve` command; blocks without the GIL).
  m.def("_service_serve", [](const std::string& dir, const std::string& cache_dir, double idle_s, int workers,
                             double request_timeout_s, int test_delay_ms) {
    service::ServerOptions options;
    options.dir = dir;
    options.cache_dir = cache_dir;
    options.cache_max_mb = GlobalConfig().cache.max_mb;
    options.toolchain = GlobalConfig().compile.cxx;
    options.idle_s = idle_s;
    options.workers = workers;
    options.request_timeout_s = request_timeout_s;
    options.test_delay_ms = test_delay_ms;
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = service::Serve(options);
    }
    RaiseIfError(status);
  });
  // "status" or "shutdown" to the service; `start`: start one if none answers.
  m.def(
      "_service_call",
      [](const std::string& what, bool start, const std::string& mode, double timeout_s) {
        proto::ServiceRequest request;
        request.set_protocol_version(service::kProtocolVersion);
        if (what == "status") {
          request.mutable_status();
        } else if (what == "shutdown") {
          request.mutable_shutdown();
        } else {
          throw py::value_error("_service_call: 'status' or 'shutdown', not '" + what + "'");
        }
        absl::StatusOr<proto::ServiceReply> reply;
        {
          py::gil_scoped_release release;
          reply = service::Call(OptionsFor(mode), request, start, timeout_s);
        }
        RaiseIfError(reply.status());
        if (reply->code() != 0)
          RaiseIfError(absl::Status(static_cast<absl::StatusCode>(reply->code()), reply->message()));
        return StatusDict(reply->status());
      },
      py::arg("what"), py::arg("start") = false, py::arg("mode") = "", py::arg("timeout_s") = 30.0);
  // At import in auto mode: start this user's service now if none runs.
  m.def("_service_start_in_background", [] {
    if (GlobalConfig().cache.compile_service == "auto") service::StartInBackground(OptionsFor(""));
  });
  m.def("_service_last_fallback", [] { return service::LastFallbackReason(); });
}

}  // namespace torch_neuron::python

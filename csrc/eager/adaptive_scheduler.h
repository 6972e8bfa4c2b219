// The adaptive eager scheduler (DESIGN.md "Adaptive eager"): TORCH_NEURON_MODE=eager.
//
// Traced ops are cut into groups by content-defined chunking of their op keys
// (eager/grouper.h). A group seen for the first time runs op by op, each op
// queued the moment it is traced through its own cached executable; when the
// group ends, the graph of the whole group (its ops rebuilt over leaves that
// hold no buffers, its outputs the values still alive) compiles in the
// background on a pool of compile workers, through the provider chain (so the
// disk cache and the compile service serve it; with tiered compilation the
// group is ready once its tier-0 stand-in is built, and tier 1 follows in
// the background, lazy/executable_cache.h). Once a group's graph is
// compiled, the next occurrence of its first ops is held back as pending IR;
// if the group comes out the same, it runs as that one graph; if it diverges
// (other ops, other live outputs) the held ops run op by op at once and the
// new variant compiles in turn. A variant whose compile fails is remembered
// and its group runs op by op for good. Any sync ends a group, a mark_step
// also ends the step whose share of grouped ops the metrics report.
//
// Results are those of lazy mode: the held group is the graph lazy mode
// would have built for those ops, and op-by-op runs are one-op graphs of the
// same ops. TORCH_NEURON_LAUNCH_BLOCKING=1 holds nothing back.
#pragma once

#include <cstdint>
#include <vector>

namespace torch_neuron::eager {

// Installs the scheduler as eager mode's (lazy::InstallAdaptiveScheduler).
void InstallAdaptiveScheduler();

// Waits until every group compile queued so far has finished (tests, and
// config overrides, which must not change the config under a compile).
void WaitForGroupCompiles();

// Drops the group compiles no worker has started (at exit).
void DropQueuedGroupCompiles();

// Test hook, no setting: while on, every group compile queued fails, to show
// that such a group runs op by op for good (torch_neuron._C's
// _eager_fail_group_compiles_for_testing).
void FailGroupCompilesForTesting(bool fail);

// A group that ended: its key (the hash of its op keys), its length and
// whether it ran as one compiled graph.
struct EndedGroup {
  uint64_t key = 0;
  int ops = 0;
  bool as_graph = false;
};

// The most recent groups that ended, oldest first (at most 1024).
std::vector<EndedGroup> RecentGroups();

// Ops that ran inside compiled groups, and all ops, over the last `steps`
// steps (a step ends at a mark_step).
struct GroupedShare {
  int64_t grouped = 0;
  int64_t ops = 0;
  int steps = 0;
};
GroupedShare GroupedShareOfLastSteps(int steps);

// Forgets the ended groups and steps (with the counters' reset).
void ResetHistory();

}  // namespace torch_neuron::eager

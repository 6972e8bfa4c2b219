#include "runtime/launch.h"

#include <gtest/gtest.h>

namespace torch_neuron::runtime {
namespace {

// Three parameters (say a scalar, and two 16-byte buffers), two outputs: output
// 0 may take parameter 1 or 2, output 1 only parameter 2.
Program ThreeParameters() {
  Program p;
  p.num_registers = 3;
  p.parameter_registers = {0, 1, 2};
  p.outputs = {1, 2};
  p.donation_candidates = {{1, 2}, {2}};
  return p;
}

TEST(LaunchTest, OnlyCandidatesTheCallerAloneHoldsAreDonated) {
  const Program p = ThreeParameters();
  EXPECT_EQ(DonatedParameters(p, {true, true, true}), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(DonatedParameters(p, {true, false, true}), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(DonatedParameters(p, {false, false, false}), (std::vector<bool>{false, false, false}));
  Program none = p;
  none.donation_candidates = {{}, {}};  // a signature without donations donates nothing
  EXPECT_EQ(DonatedParameters(none, {true, true, true}), (std::vector<bool>{false, false, false}));
}

TEST(LaunchTest, EachDonorGoesToOneOutputAmongItsCandidates) {
  const Program p = ThreeParameters();
  std::vector<bool> donated = {false, true, true};
  std::vector<bool> available = donated;
  EXPECT_EQ(TakeDonor(p, 0, available), 1);
  EXPECT_EQ(TakeDonor(p, 1, available), 2);
  EXPECT_EQ(available, (std::vector<bool>{false, false, false}));

  // Parameter 2 taken by output 0 (1 was not donated): output 1 gets none.
  donated = {false, false, true};
  available = donated;
  EXPECT_EQ(TakeDonor(p, 0, available), 2);
  EXPECT_EQ(TakeDonor(p, 1, available), -1);
  EXPECT_EQ(TakeDonor(p, 7, available), -1);  // no such output
}

}  // namespace
}  // namespace torch_neuron::runtime

#include "ir/op_traits.h"

#include <gtest/gtest.h>

#include <string>

namespace torch_neuron::ir {
namespace {

TEST(OpTraitsTest, DataDependentOpsAndTheirVariantsButNotNonzeroStatic) {
  for (const char* op : {"aten::nonzero", "aten::nonzero.out", "aten::masked_select",
                         "aten::unique_consecutive", "aten::unique_dim", "aten::_unique2",
                         "aten::repeat_interleave.Tensor", "aten::bincount", "aten::argwhere"}) {
    EXPECT_TRUE(TraitsOf(op).data_dependent) << op;
  }
  for (const char* op : {"aten::nonzero_static", "aten::repeat_interleave.self_int", "aten::add.Tensor"}) {
    EXPECT_FALSE(TraitsOf(op).data_dependent) << op;
  }
}

TEST(OpTraitsTest, OnlyTheMetadataAssertChecksMetadataOnly) {
  EXPECT_TRUE(TraitsOf("aten::_assert_tensor_metadata").checks_metadata_only);
  for (const char* op : {"aten::_assert_async", "aten::_assert_async.msg", "aten::_linalg_check_errors"}) {
    EXPECT_FALSE(TraitsOf(op).checks_metadata_only) << op;
  }
}

TEST(OpTraitsTest, OnlyAssertAsyncIsATensorAssert) {
  EXPECT_TRUE(TraitsOf("aten::_assert_async").tensor_assert);
  EXPECT_TRUE(TraitsOf("aten::_assert_async.msg").tensor_assert);
  for (const char* op : {"aten::_assert_tensor_metadata", "aten::_linalg_check_errors",
                         "aten::_assert_scalar", "aten::_functional_assert_async.msg"}) {
    EXPECT_FALSE(TraitsOf(op).tensor_assert) << op;
  }
}

TEST(OpTraitsTest, IdentitiesAreExactNames) {
  for (const char* op : {"aten::detach_copy", "aten::alias_copy", "aten::clone", "aten::detach",
                         "aten::alias", "aten::lift_fresh_copy"}) {
    EXPECT_TRUE(TraitsOf(op).identity) << op;
  }
  EXPECT_FALSE(TraitsOf("aten::_to_copy").identity);
  EXPECT_FALSE(TraitsOf("aten::clone.out").identity);
}

TEST(OpTraitsTest, CpuIndexTensorsForIndexingAndCtcLengths) {
  for (const char* op : {"aten::index.Tensor", "aten::index_put", "aten::_index_put_impl_", "aten::_ctc_loss",
                         "aten::_ctc_loss.Tensor"}) {
    EXPECT_TRUE(TraitsOf(op).cpu_index_tensors) << op;
  }
  EXPECT_FALSE(TraitsOf("aten::gather").cpu_index_tensors);
}

TEST(OpTraitsTest, ConstantFactoriesByKindAndOnlyTheirDefaultOverloads) {
  EXPECT_EQ(TraitsOf("aten::zeros").fill, FillKind::kZeros);
  EXPECT_EQ(TraitsOf("aten::new_zeros").fill, FillKind::kZeros);
  EXPECT_EQ(TraitsOf("aten::ones_like").fill, FillKind::kOnes);
  EXPECT_EQ(TraitsOf("aten::full").fill, FillKind::kFull);
  EXPECT_EQ(TraitsOf("aten::new_full").fill, FillKind::kFull);
  EXPECT_EQ(TraitsOf("aten::zeros.names").fill, FillKind::kNone);
  EXPECT_EQ(TraitsOf("aten::empty.memory_format").fill, FillKind::kNone);
}

TEST(OpTraitsTest, RandomByTheOperatorsNameNotItsOverload) {
  for (const char* op :
       {"aten::rand", "aten::randn_like", "aten::native_dropout", "aten::bernoulli.p",
        "aten::normal.Tensor_float", "aten::uniform_", "aten::log_normal_", "aten::multinomial"}) {
    EXPECT_TRUE(TraitsOf(op).random) << op;
  }
  EXPECT_FALSE(TraitsOf("aten::add.Tensor").random);
  EXPECT_FALSE(TraitsOf("aten::foo.uniform").random);  // an overload named so: not a draw
}

TEST(OpTraitsTest, ShapeFromScalarValuesAndStorageAddressing) {
  EXPECT_TRUE(TraitsOf("aten::arange.start_step").shape_from_scalar_values);
  EXPECT_TRUE(TraitsOf("aten::linspace").shape_from_scalar_values);
  EXPECT_FALSE(TraitsOf("aten::add.Scalar").shape_from_scalar_values);
  EXPECT_TRUE(TraitsOf("aten::linalg_vector_norm").meta_checks_scalar_values);
  EXPECT_TRUE(TraitsOf("aten::renorm_").meta_checks_scalar_values);
  EXPECT_TRUE(TraitsOf("aten::celu.out").probes_on_cpu);
  EXPECT_FALSE(TraitsOf("aten::add.Scalar").meta_checks_scalar_values);
  EXPECT_TRUE(TraitsOf("aten::as_strided_copy").addresses_storage);
  EXPECT_TRUE(TraitsOf("aten::_reshape_alias_copy").addresses_storage);
  // The view forms too: composites call them below functionalization (under
  // inference_mode), with strides that address the storage layout.
  EXPECT_TRUE(TraitsOf("aten::as_strided").addresses_storage);
  EXPECT_TRUE(TraitsOf("aten::_reshape_alias").addresses_storage);
  EXPECT_FALSE(TraitsOf("aten::view").addresses_storage);
}

TEST(OpTraitsTest, ViewFormsAndStrideAgnosticReaders) {
  EXPECT_EQ(TraitsOf("aten::view_copy").view_form, "aten::reshape");
  EXPECT_EQ(TraitsOf("aten::slice_copy.Tensor").view_form, "aten::slice.Tensor");
  EXPECT_TRUE(TraitsOf("aten::_to_copy").view_form.empty());
  EXPECT_TRUE(TraitsOf("aten::view_copy.dtype").view_form.empty());  // reinterprets bits: no reshape
  EXPECT_EQ(ViewForms().size(), 17u);
  for (const auto& [copy, view] : ViewForms()) EXPECT_EQ(TraitsOf(copy).view_form, view);
  EXPECT_TRUE(TraitsOf("aten::mm").stride_agnostic);
  EXPECT_TRUE(TraitsOf("neuron::fused_kernel").stride_agnostic);
  EXPECT_FALSE(TraitsOf("aten::cat").stride_agnostic);
}

TEST(OpTraitsTest, CpuParityTraitsByTheOperatorsNameForEveryOverload) {
  EXPECT_TRUE(TraitsOf("aten::fill_.Scalar").writes_overlapping_memory);
  EXPECT_TRUE(TraitsOf("aten::zero_").writes_overlapping_memory);
  EXPECT_FALSE(TraitsOf("aten::add_.Tensor").writes_overlapping_memory);
  EXPECT_FALSE(TraitsOf("aten::fill").writes_overlapping_memory);  // the functional form writes nothing
  EXPECT_TRUE(TraitsOf("aten::requires_grad_").writes_metadata_only);
  EXPECT_FALSE(TraitsOf("aten::copy_").writes_metadata_only);
  EXPECT_TRUE(TraitsOf("aten::eq_.Tensor").elementwise_untagged);
  EXPECT_TRUE(TraitsOf("aten::__iand__.Scalar").elementwise_untagged);
  EXPECT_FALSE(TraitsOf("aten::eq.Tensor").elementwise_untagged);
  EXPECT_TRUE(TraitsOf("aten::__irshift__.Tensor").casts_before_own_checks);
  EXPECT_FALSE(TraitsOf("aten::bitwise_right_shift_.Tensor").casts_before_own_checks);
  EXPECT_TRUE(TraitsOf("aten::random_.from").probes_random_parameters);
  EXPECT_TRUE(TraitsOf("aten::bernoulli_.float").probes_random_parameters);
  EXPECT_FALSE(TraitsOf("aten::bernoulli.p").probes_random_parameters);
  EXPECT_TRUE(TraitsOf("aten::bernoulli.p").probes_on_cpu);
  EXPECT_TRUE(TraitsOf("aten::searchsorted.Tensor_out").probes_on_cpu);
  EXPECT_FALSE(TraitsOf("aten::searchsorted.Tensor_out").probe_by_kinds);
  EXPECT_TRUE(TraitsOf("aten::sub_.Tensor").probes_on_cpu && TraitsOf("aten::sub_.Tensor").probe_by_kinds);
  EXPECT_TRUE(TraitsOf("aten::rsub.Scalar").probe_by_kinds);
  EXPECT_FALSE(TraitsOf("aten::mul.Tensor").probes_on_cpu);
}

TEST(OpTraitsTest, AnUnknownOpHasNoTraitsAndAnswersAreStable) {
  const OpTraits& t = TraitsOf("custom::mystery.op");
  EXPECT_FALSE(t.data_dependent || t.identity || t.cpu_index_tensors || t.random ||
               t.shape_from_scalar_values || t.meta_checks_scalar_values || t.addresses_storage ||
               t.stride_agnostic);
  EXPECT_FALSE(t.writes_overlapping_memory || t.writes_metadata_only || t.elementwise_untagged ||
               t.casts_before_own_checks || t.probes_random_parameters || t.probes_on_cpu ||
               t.probe_by_kinds);
  EXPECT_EQ(t.fill, FillKind::kNone);
  EXPECT_TRUE(t.view_form.empty());
  EXPECT_EQ(&TraitsOf(std::string("custom::mystery.op")), &t);  // cached: one entry per name
}

}  // namespace
}  // namespace torch_neuron::ir

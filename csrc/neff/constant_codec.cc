#include "neff/constant_codec.h"

#include <ATen/ops/empty.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace torch_neuron::neff {
namespace {

absl::Status DataLoss(const std::string& what) {
  return absl::DataLossError(absl::StrCat("malformed NEFF constant: ", what));
}

}  // namespace

bool ValidDtype(int32_t dtype) {
  return dtype >= 0 && dtype < static_cast<int32_t>(c10::ScalarType::Undefined);
}

absl::Status EncodeConstant(const c10::IValue& v, proto::ConstantValue* out) {
  if (v.isNone()) {
    out->set_none(true);
  } else if (v.isBool()) {
    out->set_bool_value(v.toBool());
  } else if (v.isInt()) {
    out->set_int_value(v.toInt());
  } else if (v.isDouble()) {
    out->set_double_value(v.toDouble());
  } else if (v.isString()) {
    out->set_string_value(v.toStringRef());
  } else if (v.isDevice()) {
    out->mutable_device()->set_type(static_cast<int32_t>(v.toDevice().type()));
    out->mutable_device()->set_index(v.toDevice().index());
  } else if (v.isScalar()) {
    const c10::Scalar s = v.toScalar();
    if (s.isBoolean()) {
      out->mutable_scalar()->set_bool_value(s.toBool());
    } else if (s.isIntegral(false)) {
      out->mutable_scalar()->set_int_value(s.toLong());
    } else if (s.isFloatingPoint()) {
      out->mutable_scalar()->set_double_value(s.toDouble());
    } else if (s.isComplex()) {
      const c10::complex<double> z = s.toComplexDouble();
      out->mutable_scalar()->mutable_complex_value()->set_real(z.real());
      out->mutable_scalar()->mutable_complex_value()->set_imag(z.imag());
    } else {
      return absl::UnimplementedError("a symbolic scalar has no NEFF form");
    }
  } else if (v.isIntList()) {
    // mutable_* first: an empty list still sets the kind.
    proto::IntList* list = out->mutable_int_list();
    for (int64_t x : v.toIntVector()) list->add_values(x);
  } else if (v.isDoubleList()) {
    proto::DoubleList* list = out->mutable_double_list();
    for (double x : v.toDoubleVector()) list->add_values(x);
  } else if (v.isBoolList()) {
    proto::BoolList* list = out->mutable_bool_list();
    for (bool x : v.toBoolList()) list->add_values(x);
  } else if (v.isTensor()) {
    const at::Tensor t = v.toTensor().contiguous();
    if (!t.device().is_cpu()) return absl::UnimplementedError("only CPU tensors are NEFF constants");
    proto::TensorValue* tv = out->mutable_tensor();
    tv->set_dtype(static_cast<int32_t>(t.scalar_type()));
    for (int64_t s : t.sizes()) tv->add_sizes(s);
    tv->set_data(static_cast<const char*>(t.data_ptr()), t.nbytes());
  } else if (v.isList() || v.isTuple()) {
    proto::ValueList* list = out->mutable_list();
    list->set_tuple(v.isTuple());
    c10::ArrayRef<c10::IValue> elements =
        v.isList() ? v.toListRef() : c10::ArrayRef<c10::IValue>(v.toTupleRef().elements());
    for (const c10::IValue& e : elements) {
      absl::Status s = EncodeConstant(e, list->add_values());
      if (!s.ok()) return s;
    }
  } else {
    return absl::UnimplementedError(absl::StrCat("a ", v.tagKind(), " constant has no NEFF form"));
  }
  return absl::OkStatus();
}

absl::StatusOr<c10::IValue> DecodeConstant(const proto::ConstantValue& v) {
  switch (v.kind_case()) {
    case proto::ConstantValue::kNone:
      return c10::IValue();
    case proto::ConstantValue::kBoolValue:
      return c10::IValue(v.bool_value());
    case proto::ConstantValue::kIntValue:
      return c10::IValue(v.int_value());
    case proto::ConstantValue::kDoubleValue:
      return c10::IValue(v.double_value());
    case proto::ConstantValue::kStringValue:
      return c10::IValue(v.string_value());
    case proto::ConstantValue::kDevice: {
      const int32_t type = v.device().type();
      if (type != static_cast<int32_t>(c10::DeviceType::CPU) &&
          type != static_cast<int32_t>(c10::DeviceType::PrivateUse1)) {
        return DataLoss(absl::StrCat("device type ", type));
      }
      if (v.device().index() < -1 || v.device().index() > 127) {
        return DataLoss(absl::StrCat("device index ", v.device().index()));
      }
      return c10::IValue(
          c10::Device(static_cast<c10::DeviceType>(type), static_cast<c10::DeviceIndex>(v.device().index())));
    }
    case proto::ConstantValue::kScalar:
      switch (v.scalar().kind_case()) {
        case proto::ScalarValue::kIntValue:
          return c10::IValue(c10::Scalar(v.scalar().int_value()));
        case proto::ScalarValue::kDoubleValue:
          return c10::IValue(c10::Scalar(v.scalar().double_value()));
        case proto::ScalarValue::kBoolValue:
          return c10::IValue(c10::Scalar(v.scalar().bool_value()));
        case proto::ScalarValue::kComplexValue:
          return c10::IValue(
              c10::complex<double>(v.scalar().complex_value().real(), v.scalar().complex_value().imag()));
        default:
          return DataLoss("scalar without a value");
      }
    case proto::ConstantValue::kIntList:
      return c10::IValue(std::vector<int64_t>(v.int_list().values().begin(), v.int_list().values().end()));
    case proto::ConstantValue::kDoubleList:
      return c10::IValue(
          std::vector<double>(v.double_list().values().begin(), v.double_list().values().end()));
    case proto::ConstantValue::kBoolList: {
      c10::List<bool> list;
      for (bool b : v.bool_list().values()) list.push_back(b);
      return c10::IValue(list);
    }
    case proto::ConstantValue::kTensor: {
      const proto::TensorValue& tv = v.tensor();
      if (!ValidDtype(tv.dtype())) return DataLoss(absl::StrCat("tensor dtype ", tv.dtype()));
      const auto dtype = static_cast<c10::ScalarType>(tv.dtype());
      int64_t numel = 1;
      for (int64_t s : tv.sizes()) {
        if (s < 0 || s > (int64_t{1} << 40) || (s > 0 && numel > (int64_t{1} << 40) / s)) {
          return DataLoss("tensor sizes out of range");
        }
        numel *= s;
      }
      const size_t nbytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
      if (nbytes != tv.data().size()) {
        return DataLoss(absl::StrCat("tensor of ", numel, " elements with ", tv.data().size(), " bytes"));
      }
      at::Tensor t = at::empty(std::vector<int64_t>(tv.sizes().begin(), tv.sizes().end()),
                               at::TensorOptions().dtype(dtype));
      if (nbytes > 0) std::memcpy(t.data_ptr(), tv.data().data(), nbytes);
      return c10::IValue(t);
    }
    case proto::ConstantValue::kList: {
      std::vector<c10::IValue> elements;
      for (const proto::ConstantValue& e : v.list().values()) {
        absl::StatusOr<c10::IValue> d = DecodeConstant(e);
        if (!d.ok()) return d.status();
        elements.push_back(*std::move(d));
      }
      if (v.list().tuple()) return c10::IValue(c10::ivalue::Tuple::create(std::move(elements)));
      c10::impl::GenericList list(c10::AnyType::get());
      for (auto& e : elements) list.push_back(std::move(e));
      return c10::IValue(list);
    }
    case proto::ConstantValue::KIND_NOT_SET:
      break;
  }
  return DataLoss("value without a kind");
}

}  // namespace torch_neuron::neff
